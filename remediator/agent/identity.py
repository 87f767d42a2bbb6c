"""The hardware the agent runs on, for the controller's ledger (issue #28): the machine's DMI
serial (/sys/class/dmi/id/product_serial, root-readable on most boards) and each GPU's board
serial, VBIOS and driver from `nvidia-smi --query-gpu=serial,uuid,pci.bus_id,vbios_version,
driver_version --format=csv` when nvidia-smi is present. Read once: none of it changes while the
node is up (a driver upgrade restarts the agent with the node). It travels as labels on the
agent's XID signals (`dmi_serial`, `gpu_serial`, `vbios`, `driver`) and in the
heartbeat: whole on the first one and whenever the controller's answer asks (`send_hardware`),
else as a 16-hex digest (docs/agent.md), so the controller knows a machine before its first
fault (a quarantined host reinstalled under a new node name is fenced on arrival) at the cost
of one short field per heartbeat."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from remediator.agent.gpus import GpuInfo
from remediator.ledger.identity import (
    SMI_QUERY,
    GpuIdentity,
    HostHardware,
    dmi_serial,
    parse_smi_csv,
    pci,
)

log = logging.getLogger(__name__)

DMI_SERIAL_FILE = Path("/sys/class/dmi/id/product_serial")
SMI_COMMAND = ("nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv")
SMI_TIMEOUT = 20.0
MAX_GPUS, MAX_INDEX = 64, 1023  # the heartbeat's bounds (web/agents.py HardwareIn)

Run = Callable[[Sequence[str]], str]


def run_command(command: Sequence[str]) -> str:
    return subprocess.run(
        list(command), capture_output=True, text=True, check=True, timeout=SMI_TIMEOUT
    ).stdout


@dataclass(frozen=True)
class HostIdentity:
    dmi_serial: str | None = None
    gpus: Mapping[str, GpuIdentity] = field(default_factory=dict)  # by PCI key DDDD:BB:DD

    def labels(self, pci: str) -> dict[str, str]:
        """What an XID signal about the GPU at `pci` carries of it."""
        found: dict[str, str] = {}
        if self.dmi_serial:
            found["dmi_serial"] = self.dmi_serial
        gpu = self.gpus.get(pci)
        if gpu is not None and gpu.serial:
            found["gpu_serial"] = gpu.serial
        if gpu is not None and gpu.vbios:
            found["vbios"] = gpu.vbios
        if gpu is not None and gpu.driver:
            found["driver"] = gpu.driver
        return found


def read_identity(
    dmi_file: Path = DMI_SERIAL_FILE,
    smi_command: Sequence[str] | None = SMI_COMMAND,
    run: Run = run_command,
) -> HostIdentity:
    """What can be read; a missing file or nvidia-smi (a VM without DMI, a host without the
    tools) leaves that part unknown and is logged, never fatal."""
    try:
        serial = dmi_serial(dmi_file.read_text(errors="replace"))
    except OSError as exc:
        log.info("no DMI serial: %s", exc)
        serial = None
    gpus: dict[str, GpuIdentity] = {}
    if smi_command is not None:
        try:
            output = run(smi_command)
        except (OSError, subprocess.SubprocessError) as exc:
            log.info("no GPU serials from nvidia-smi: %s", exc)
        else:
            gpus = {g.pci_bus_id: g for g in parse_smi_csv(output) if g.pci_bus_id}
    return HostIdentity(serial, gpus)


def host_hardware(identity: HostIdentity, driver: Mapping[str, GpuInfo]) -> HostHardware:
    """What the heartbeat says of the host: the DMI serial and every GPU with a UUID, the
    driver's (UUID, PCI address, minor number, model) joined by PCI address with nvidia-smi's
    (board serial, VBIOS, driver version); a GPU only nvidia-smi lists is kept too."""
    gpus: list[GpuIdentity] = []
    for key, info in sorted(driver.items()):
        smi = identity.gpus.get(key)
        uuid = _fit(info.uuid or (smi.uuid if smi is not None else None), 128)
        if uuid is None or not uuid.startswith("GPU-"):
            continue
        gpus.append(
            GpuIdentity(
                uuid=uuid,
                pci_bus_id=pci(key),
                index=info.index if info.index is not None and info.index <= MAX_INDEX else None,
                serial=_fit(smi.serial if smi is not None else None, 64),
                model=_fit(info.model, 128),
                vbios=_fit(smi.vbios if smi is not None else None, 64),
                driver=_fit(smi.driver if smi is not None else None, 64),
            )
        )
    gpus.extend(
        g for key, g in sorted(identity.gpus.items()) if key not in driver and g.uuid[:4] == "GPU-"
    )
    return HostHardware(_fit(identity.dmi_serial, 128), tuple(gpus[:MAX_GPUS]))


def _fit(value: str | None, limit: int) -> str | None:
    """What the heartbeat's bounds take (printable, `limit` characters at most), else unknown:
    one odd field must not get every heartbeat refused."""
    if value is None or len(value) > limit or any(ord(c) < 0x20 or c == "\x7f" for c in value):
        return None
    return value
