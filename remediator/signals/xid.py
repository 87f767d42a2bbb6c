"""NVIDIA XID catalog and kernel-log parser.

An XID number alone tells on-call little; the catalog says what it means, what usually causes
it, and what NVIDIA's catalog (the "Analyzing Xid Catalog" sheet) prescribes right away and
when investigating. Policies read `fatal` and the action buckets; the UI shows `explanation`.

Kernel-log XID lines come from node-problem-detector style sources; `parse_kernel_line` turns
them into (pci, code, message) so they can be mapped to a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType


class Cause(StrEnum):
    HARDWARE = "hardware"
    DRIVER = "driver"
    APPLICATION = "application"
    THERMAL = "thermal"
    INFORMATIONAL = "informational"


class Action(StrEnum):
    """NVIDIA's resolution buckets, spelled as in the catalog."""

    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    IGNORE = "IGNORE"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    UPDATE_SWFW = "UPDATE_SWFW"
    CHECK_UVM = "CHECK_UVM"
    CHECK_APP_CUDA = "CHECK_APP/CUDA"
    INVESTIGATE_SW = "INVESTIGATE_SW"
    INVESTIGATE_SW_USER = "INVESTIGATE_SW_USER"
    INVESTIGATE_LINK_SI = "INVESTIGATE_LINK_SI"
    WORKFLOW_XID_13 = "WORKFLOW_XID_13"
    WORKFLOW_XID_31 = "WORKFLOW_XID_31"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    XID_137_FLOW = "XID_137_FLOW"
    XID_154 = "XID_154"


# The GPU cannot be trusted until it is reset or the machine restarted: these immediate
# actions make an XID fatal (the same line NVSentinel draws for its fatal flag).
FATAL_ACTIONS = frozenset(
    {
        Action.RESET_GPU,
        Action.RESTART_BM,
        Action.RESTART_VM,
        Action.WORKFLOW_XID_48,
        Action.WORKFLOW_NVLINK_ERR,
        Action.WORKFLOW_NVLINK5_ERR,
    }
)


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    name: str
    meaning: str
    causes: frozenset[Cause]
    immediate: Action
    investigatory: Action | None
    explanation: str

    @property
    def fatal(self) -> bool:
        return self.immediate in FATAL_ACTIONS


_HW, _DRV, _APP, _HOT, _INFO = (
    Cause.HARDWARE,
    Cause.DRIVER,
    Cause.APPLICATION,
    Cause.THERMAL,
    Cause.INFORMATIONAL,
)


def _x(
    code: int,
    mnemonic: str,
    name: str,
    meaning: str,
    causes: set[Cause],
    immediate: Action,
    investigatory: Action | None,
    explanation: str,
) -> XidInfo:
    return XidInfo(
        code, mnemonic, name, meaning, frozenset(causes), immediate, investigatory, explanation
    )


_NVLINK5_UNITS = {
    144: ("SAW", "the NVLink switch-access wrapper"),
    145: ("RLW", "the NVLink remote link wrapper"),
    146: ("TLW", "the NVLink transaction layer wrapper"),
    147: ("TREX", "the NVLink traffic replay engine"),
    148: ("NVLPW_CTRL", "the NVLink power/control unit"),
    149: ("NETIR", "the NVLink network interface"),
    150: ("MSE", "the NVLink management/security engine"),
}

# Media and copy engines: an exception there kills the application using the engine; training
# jobs rarely use the media engines, so these are restart-the-app events.
_ENGINES = {
    **{code: f"CE{n}" for code, n in ((70, 3), (71, 4), (72, 5), (75, 6), (76, 7), (77, 8))},
    **{82: "NVJPG0", 83: "NVDEC1", 84: "NVDEC2", 85: "CE9", 86: "OFA0", 88: "NVDEC3"},
    **{89: "NVDEC4", 96: "NVDEC5", 97: "NVDEC6", 98: "NVDEC7", 139: "OFA1"},
    **{code: f"NVJPG{code - 98}" for code in range(99, 106)},
}

_ENTRIES: tuple[XidInfo, ...] = (
    _x(
        8,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        "GPU stopped processing",
        "A channel stopped making progress and was torn down.",
        {_DRV, _APP, _HW, _HOT},
        Action.RESTART_APP,
        Action.CONTACT_SUPPORT,
        "Usually the job hung the GPU; restart it. Repeats on one GPU point at hardware.",
    ),
    _x(
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION",
        "Graphics engine exception",
        "An SM raised an exception (illegal address, warp error) while running a kernel.",
        {_APP, _DRV, _HW, _HOT},
        Action.RESTART_APP,
        Action.WORKFLOW_XID_13,
        "Mostly an application bug (out-of-bounds access). Only if it follows the GPU across "
        "jobs, run DCGM diagnostics.",
    ),
    _x(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault",
        "The GPU MMU saw an access to an unmapped or protected address.",
        {_APP, _DRV, _HW},
        Action.RESTART_APP,
        Action.WORKFLOW_XID_31,
        "Almost always the application (or a driver regression after an upgrade); the GPU is "
        "fine for other work.",
    ),
    _x(
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "Invalid or corrupted push buffer stream",
        "The push-buffer DMA engine read a corrupted command stream.",
        {_DRV, _HW, _HOT},
        Action.RESTART_APP,
        Action.CHECK_APP_CUDA,
        "Restart the job; if it repeats without application changes, suspect PCIe or memory.",
    ),
    _x(
        38,
        "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT",
        "Driver firmware error",
        "The graphics context-switch firmware's watchdog fired.",
        {_DRV},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "Driver/firmware problem, not the hardware; note it and check the driver version.",
    ),
    _x(
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing",
        "A user channel was reset after a fault; other work on the GPU continues.",
        {_APP, _DRV},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "The faulting job was killed; the GPU keeps serving others. No node action.",
    ),
    _x(
        44,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "Graphics engine fault during context switch",
        "The graphics engine faulted while switching contexts.",
        {_DRV},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "Driver-side fault; if the GPU stays wedged afterwards a reset clears it.",
    ),
    _x(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup after earlier errors",
        "Channels were torn down because of another error (often a DBE or a killed process).",
        {_DRV, _APP, _INFO},
        Action.WORKFLOW_XID_45,
        Action.IGNORE,
        "Informational: follow the XID that came with it. Seen alone on NVSwitch systems it "
        "can mean Fabric Manager stopped; restart Fabric Manager.",
    ),
    _x(
        46,
        "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
        "GPU stopped processing (timeout)",
        "The GPU did not respond within the driver's timeout.",
        {_DRV, _HW},
        Action.RESET_GPU,
        Action.CONTACT_SUPPORT,
        "The GPU is hung; it needs a reset (nvidia-smi -r) or a reboot before it can be used.",
    ),
    _x(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "Double-bit ECC error",
        "An uncorrectable ECC error in GPU memory; it was reported to the application.",
        {_HW},
        Action.WORKFLOW_XID_48,
        Action.WORKFLOW_XID_48,
        "Hardware. Drain the node; a reset activates row remapping (XID 63/64 follow). "
        "Repeated DBEs on one GPU mean RMA.",
    ),
    _x(
        54,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "Auxiliary power not connected",
        "The board's auxiliary power is missing, so the GPU runs at reduced clocks.",
        {_HW},
        Action.CHECK_MECHANICALS,
        Action.CONTACT_SUPPORT,
        "A cabling problem in the chassis: the GPU works but slowly. Needs hands in the "
        "data center, not a reboot.",
    ),
    _x(
        62,
        "PMU_HALT_ERROR",
        "Internal micro-controller halt",
        "The GPU's PMU micro-controller halted.",
        {_HW, _DRV, _HOT},
        Action.RESET_GPU,
        Action.CONTACT_SUPPORT,
        "The GPU is unusable until reset; check cooling. Report it if it repeats.",
    ),
    _x(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "Row remap / page retirement recorded",
        "A row remapping (A100+) or page retirement was recorded in the InfoROM.",
        {_HW, _INFO},
        Action.IGNORE,
        Action.IGNORE,
        "The GPU handled a memory error correctly; the remap takes effect at the next reset. "
        "Reset when convenient.",
    ),
    _x(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "Row remap recording failed",
        "Recording a row remap or page retirement in the InfoROM failed.",
        {_HW, _DRV},
        Action.RESET_GPU,
        Action.CONTACT_SUPPORT,
        "Reboot now: the bad row is not fenced off. If it happens again the GPU needs RMA.",
    ),
    _x(
        66,
        "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION",
        "Illegal access by driver",
        "Firmware saw a register access it does not allow.",
        {_DRV, _APP},
        Action.IGNORE,
        Action.INVESTIGATE_SW,
        "Software problem; no node action.",
    ),
    _x(
        68,
        "ROBUST_CHANNEL_NVDEC0_ERROR",
        "Video decoder exception",
        "The NVDEC video decoder raised an exception.",
        {_HW, _DRV, _APP},
        Action.RESTART_APP,
        Action.CONTACT_SUPPORT,
        "Restart the application; training jobs rarely use NVDEC.",
    ),
    _x(
        69,
        "ROBUST_CHANNEL_GR_CLASS_ERROR",
        "Graphics engine class error",
        "The graphics engine received an invalid class/method.",
        {_HW, _DRV},
        Action.RESTART_APP,
        Action.CHECK_APP_CUDA,
        "Restart the application; check the CUDA stack if it repeats.",
    ),
    _x(
        74,
        "NVLINK_ERROR",
        "NVLink error",
        "A link from this GPU to another GPU or NVSwitch reported a fatal error.",
        {_HW, _DRV},
        Action.WORKFLOW_NVLINK_ERR,
        Action.CONTACT_SUPPORT,
        "Needs a GPU reset or reboot. The fault may be at the remote end of the link, so look "
        "at the peer GPU too; repeated errors on one link mean reseat or replace.",
    ),
    _x(
        78,
        "VGPU_START_ERROR",
        "vGPU start error",
        "A vGPU could not start (host/guest driver mismatch).",
        {_DRV},
        Action.UPDATE_SWFW,
        Action.UPDATE_SWFW,
        "Fix the driver versions; hardware is not implicated.",
    ),
    _x(
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "GPU has fallen off the bus",
        "The driver can no longer reach the GPU over PCIe.",
        {_HW, _DRV, _HOT},
        Action.RESTART_BM,
        Action.CONTACT_SUPPORT,
        "The GPU is gone until the machine is power-cycled; usually a PCIe link or board "
        "failure. Drain and replace the node; RMA if it recurs.",
    ),
    _x(
        80,
        "PBDMA_PUSHBUFFER_CRC_MISMATCH",
        "Corrupted data sent to GPU",
        "Data arriving over PCIe failed its CRC check.",
        {_HW, _DRV},
        Action.RESTART_APP,
        Action.CHECK_APP_CUDA,
        "Restart the job; repeats suggest PCIe signal or host memory problems.",
    ),
    _x(
        92,
        "EXCESSIVE_SBE_INTERRUPTS",
        "Excessive single-bit ECC rate",
        "Single-bit (correctable) ECC errors arrive at a high rate.",
        {_HW, _DRV},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "Still correct, but a warning sign of failing memory: watch for DBEs and row remaps.",
    ),
    _x(
        93,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        "InfoROM wear limit exceeded",
        "The InfoROM's provisioned write budget was exceeded (non-fatal).",
        {_DRV, _INFO},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "No impact on running work; report it.",
    ),
    _x(
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "Contained memory error",
        "An uncorrectable memory error that the GPU confined to one application.",
        {_HW},
        Action.RESTART_APP,
        Action.IGNORE,
        "Only the affected application must restart; reset the GPU when convenient so the "
        "row remap takes effect.",
    ),
    _x(
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "Uncontained memory error",
        "An uncorrectable memory error that could affect every application on the GPU.",
        {_HW},
        Action.RESET_GPU,
        Action.IGNORE,
        "Without MIG, reboot the node now; with MIG, drain the other instances and reset.",
    ),
    _x(
        109,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        "Context-switch timeout",
        "A context switch did not finish in time.",
        {_HW, _DRV, _APP, _HOT},
        Action.RESET_GPU,
        Action.CONTACT_SUPPORT,
        "Can be the application or the GPU; the GPU needs a reset. Repeats point at hardware.",
    ),
    _x(
        110,
        "SEC_FAULT_ERROR",
        "Security fault",
        "The GPU's security engine reported a fault.",
        {_HW},
        Action.RESET_GPU,
        Action.INVESTIGATE_SW,
        "Uncommon unless hardware failed: cold-reset; contact the vendor if it persists.",
    ),
    _x(
        119,
        "GSP_RPC_TIMEOUT",
        "GSP RPC timeout",
        "The GPU System Processor did not answer a driver request.",
        {_HW, _DRV, _HOT},
        Action.RESET_GPU,
        Action.INVESTIGATE_SW,
        "The GPU is stuck until reset; often a driver/firmware issue, sometimes failing GSP "
        "hardware.",
    ),
    _x(
        120,
        "GSP_ERROR",
        "GSP error",
        "The GPU System Processor reported an error.",
        {_HW, _DRV, _HOT},
        Action.RESET_GPU,
        Action.INVESTIGATE_SW,
        "Reset the GPU; check the driver version if it repeats.",
    ),
    _x(
        121,
        "C2C_ERROR",
        "C2C link error",
        "The chip-to-chip link (Grace Hopper) reported a corrected error.",
        {_HW},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "Corrected, no immediate impact; report repeated occurrences.",
    ),
    _x(
        136,
        "ALI_TRAINING_FAIL",
        "Link training failed",
        "An NVLink failed to train.",
        {_HW},
        Action.RESET_GPU,
        Action.INVESTIGATE_LINK_SI,
        "The link is down: reset the GPU; signal-integrity problems need hardware checks.",
    ),
    _x(
        137,
        "NVLINK_PRIV_ERR",
        "NVLink privilege error",
        "An illegal NVLink peer-to-peer access was reported by the remote MMU.",
        {_APP, _DRV},
        Action.IGNORE,
        Action.XID_137_FLOW,
        "Typically an application bug; no node action.",
    ),
    _x(
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "Unrecovered ECC error",
        "Uncorrectable memory errors escaped before the driver could retire or remap them.",
        {_HW, _DRV},
        Action.RESET_GPU,
        Action.CONTACT_SUPPORT,
        "Reset the GPU; if it persists the memory is failing and the GPU needs RMA.",
    ),
    _x(
        143,
        "GPU_INIT_ERROR",
        "GPU initialization error",
        "The GPU failed to initialize.",
        {_HW, _DRV},
        Action.RESET_GPU,
        Action.CONTACT_SUPPORT,
        "The GPU is unusable; reset, and replace the node if initialization keeps failing.",
    ),
    *(
        _x(
            code,
            f"NVLINK_{unit}_ERROR",
            f"NVLink5 {unit} error",
            f"An NVLink5 error in {what}.",
            {_HW},
            Action.WORKFLOW_NVLINK5_ERR,
            Action.WORKFLOW_NVLINK5_ERR,
            "NVLink5 (Blackwell) link fault. The sub-unit decode decides between ignore and "
            "reset; treat it as needing a GPU reset unless decoded otherwise.",
        )
        for code, (unit, what) in _NVLINK5_UNITS.items()
    ),
    *(
        _x(
            code,
            f"ROBUST_CHANNEL_{engine}_ERROR",
            f"{engine} engine error",
            f"The {engine} engine raised an exception.",
            {_HW, _DRV},
            Action.RESTART_APP,
            Action.CONTACT_SUPPORT,
            "Restart the application that used the engine; report it if it repeats on one GPU.",
        )
        for code, engine in _ENGINES.items()
    ),
    _x(
        11,
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "Invalid or corrupted push buffer stream",
        "The graphics engine received a command stream it cannot execute.",
        {_DRV, _APP},
        Action.RESTART_APP,
        Action.CHECK_APP_CUDA,
        "Restart the job; check the CUDA stack if it repeats without hardware errors.",
    ),
    _x(
        25,
        "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY",
        "Invalid or illegal push buffer stream",
        "An illegal notification in the command stream.",
        {_DRV, _APP},
        Action.RESTART_APP,
        Action.CHECK_APP_CUDA,
        "Usually the application or CUDA stack; no node action.",
    ),
    _x(
        60,
        "ROBUST_CHANNEL_SEC2_ERROR",
        "Video processor exception",
        "The SEC2 engine raised an exception.",
        {_DRV},
        Action.RESTART_APP,
        Action.INVESTIGATE_SW,
        "Restart the application; a software issue rather than hardware.",
    ),
    _x(
        106,
        "SMBPBI_TEST_MESSAGE",
        "SMBPBI test message",
        "A test message sent through the out-of-band management interface.",
        {_INFO},
        Action.IGNORE,
        Action.IGNORE,
        "Someone tested the BMC path; nothing is wrong.",
    ),
    _x(
        107,
        "SMBPBI_TEST_MESSAGE_SILENT",
        "SMBPBI test message (silent)",
        "A silent test message through the out-of-band management interface.",
        {_INFO},
        Action.IGNORE,
        Action.IGNORE,
        "Someone tested the BMC path; nothing is wrong.",
    ),
    _x(
        141,
        "ROBUST_CHANNEL_FAST_PATH_ERROR",
        "CUDA fast path error",
        "An error on CUDA's fast submission path.",
        {_DRV, _APP},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "No node action; report it if it repeats.",
    ),
    _x(
        152,
        "ROBUST_CHANNEL_DLA_SMMU_ERROR",
        "DLA SMMU error",
        "The deep-learning accelerator's SMMU reported an error.",
        {_HW, _DRV},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "No immediate action; report it.",
    ),
    _x(
        153,
        "ROBUST_CHANNEL_DLA_TIMEOUT",
        "DLA timeout",
        "The deep-learning accelerator timed out.",
        {_HW, _DRV},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "No immediate action; report it.",
    ),
    _x(
        160,
        "CHANNEL_RETIREMENT_EVENT",
        "Channel retirement event",
        "The driver retired a channel after an error.",
        {_DRV},
        Action.IGNORE,
        Action.INVESTIGATE_SW,
        "The faulting work was stopped; other work continues. Look at the software if it repeats.",
    ),
    _x(
        161,
        "CHANNEL_RETIREMENT_FAILURE",
        "Channel retirement failure",
        "The driver failed to retire a channel after an error.",
        {_DRV},
        Action.IGNORE,
        Action.INVESTIGATE_SW,
        "No immediate action; investigate the driver if it repeats.",
    ),
    _x(
        151,
        "ROBUST_CHANNEL_KEY_ROTATION_ERROR",
        "Key rotation error",
        "Confidential-computing key rotation failed.",
        {_DRV},
        Action.RESTART_VM,
        Action.CONTACT_SUPPORT,
        "The protected VM must be restarted before the GPU can be used again.",
    ),
    _x(
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "GPU recovery action changed",
        "NVML's recommended recovery action changed (0 none, 1 GPU reset, 2 node reboot, "
        "3 drain P2P, 4 drain and reset).",
        {_INFO},
        Action.XID_154,
        None,
        "Informational: it refers to another XID; act on that one, with the recovery action "
        "it names.",
    ),
    _x(
        155,
        "NVLINK_SW_DEFINED_ERROR",
        "NVLink software-defined error",
        "Software declared an NVLink error condition.",
        {_DRV, _APP},
        Action.RESET_GPU,
        Action.INVESTIGATE_SW_USER,
        "Reset the GPU; look at the software that triggered it.",
    ),
    _x(
        156,
        "RESOURCE_RETIREMENT_EVENT",
        "Resource retirement event",
        "A GPU resource was retired; a reset completes the retirement.",
        {_HW},
        Action.RESET_GPU,
        Action.IGNORE,
        "Reset the GPU so the retirement takes effect.",
    ),
    _x(
        157,
        "RESOURCE_RETIREMENT_FAILURE",
        "Resource retirement failure",
        "Retiring a GPU resource failed.",
        {_HW},
        Action.IGNORE,
        Action.CONTACT_SUPPORT,
        "No immediate action; report it, the GPU may need RMA.",
    ),
    _x(
        158,
        "GPU_FATAL_TIMEOUT",
        "GPU fatal timeout",
        "The GPU hit a fatal internal timeout.",
        {_HW, _DRV},
        Action.RESET_GPU,
        Action.CONTACT_SUPPORT,
        "The GPU needs a reset; contact support if it repeats.",
    ),
    _x(
        159,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        "CHI non-data error",
        "A coherent-interconnect (CHI) error not involving data.",
        {_HW, _DRV},
        Action.CHECK_UVM,
        None,
        "Check the UVM driver state; report it if the GPU reports it alone.",
    ),
)


def _index(entries: tuple[XidInfo, ...]) -> Mapping[int, XidInfo]:
    catalog: dict[int, XidInfo] = {}
    for info in entries:
        if info.code in catalog:
            raise ValueError(f"XID {info.code} is listed twice in the catalog")
        catalog[info.code] = info
    return MappingProxyType(catalog)


CATALOG: Mapping[int, XidInfo] = _index(_ENTRIES)


def lookup(code: int) -> XidInfo | None:
    return CATALOG.get(code)


@dataclass(frozen=True, slots=True)
class KernelXid:
    """One XID reported in the kernel log; `pci` is `DDDD:BB:DD` as the driver prints it.
    `line` is the whole line it was read from: the evidence a vendor asks for (an RMA's
    xid.log), kept out of comparisons (the same XID whatever surrounded it)."""

    pci: str
    code: int
    message: str
    pid: int | None = None
    process: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    line: str = field(default="", compare=False)


# NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u][ GPU-CI:%02u]): %d, [pid=%s, name=%s, ]%s
_XID_LINE = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): (?P<code>\d+),\s*"
    r"(?:pid=(?P<pid>'[^']*'|[^,]*), name=(?P<name>[^,]*),\s*)?"
    r"(?P<message>.*?)\s*$"
)
# XID 79 is also logged without the word Xid, with a bus:device.function address.
_FALLEN_OFF = re.compile(
    r"NVRM: GPU (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\.[0-7]: "
    r"(?P<message>GPU has fallen off the bus\.?)"
)
_PCI_UUID = re.compile(
    r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): "
    r"(?P<uuid>GPU-[0-9a-fA-F-]+)"
)
FALLEN_OFF_THE_BUS = 79


def _pid(raw: str | None) -> int | None:
    if raw is None:
        return None
    raw = raw.strip("'")
    return int(raw) if raw.isdigit() else None


def _process(raw: str | None) -> str | None:
    if raw is None or raw.strip("'") in ("", "<unknown>"):
        return None
    return raw.strip("'")


def parse_kernel_line(line: str) -> KernelXid | None:
    """Parse one dmesg/journal line; None when it reports no XID."""
    match = _XID_LINE.search(line)
    if match:
        gi, ci = match["gi"], match["ci"]
        return KernelXid(
            pci=match["pci"].lower(),
            code=int(match["code"]),
            message=match["message"],
            pid=_pid(match["pid"]),
            process=_process(match["name"]),
            gpu_instance=int(gi) if gi is not None else None,
            compute_instance=int(ci) if ci is not None else None,
            line=line.strip(),
        )
    match = _FALLEN_OFF.search(line)
    if match:
        return KernelXid(
            pci=match["pci"].lower(),
            code=FALLEN_OFF_THE_BUS,
            message=match["message"],
            line=line.strip(),
        )
    return None


def parse_pci_uuid_line(line: str) -> tuple[str, str] | None:
    """`NVRM: GPU at PCI:… : GPU-<uuid>` → (pci, uuid), to map kernel XIDs to GPUs."""
    match = _PCI_UUID.search(line)
    return (match["pci"].lower(), match["uuid"]) if match else None
