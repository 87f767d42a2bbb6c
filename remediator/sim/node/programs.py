"""The host programs a remediation Job runs on a simulated node: `nvidia-smi --gpu-reset -i N`,
`dcgmi diag -r LEVEL -j`, a host reboot, and the validation programs — `nvidia-smi` (its table and
`--query-gpu` CSV, sim/node/smi.py), `all_reduce_perf` (sim/node/nccl.py) and `ibstat`
(sim/node/ibstat.py) — all reading the node's hardware profile (sim/node/hardware.py) and the
faults it carries. The simulated kubelet asks `HostPrograms.run` what a started container does; a
command it does not know keeps running, as every workload pod does.

The DCGM JSON follows the layout of DCGM 3.x `dcgmi diag -j` (see docs/repair.md): a top-level
"DCGM GPU Diagnostic" object with "test_categories", each a category with "tests", each test with
per-GPU "results" (`gpu_ids`, `status`, `warnings`), plus the driver version, the device ids and
the boards' serials. The tests of each level are DCGM 3.3's: level 1 the deployment checks, 2 adds
PCIe and GPU Memory, 3 the Diagnostic, Targeted Stress, Targeted Power and Memory Bandwidth
plugins, 4 Pulse Test and Memtest (the EUD plugin, which needs a separate package, is left out).
A GPU that still carries a fault fails every per-GPU test of the run — a simplification: a real
run fails the tests that exercise the broken part.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from remediator.clock import Clock, SystemClock
from remediator.sim.kube.controllers.context import ProgramRun
from remediator.sim.node import ibstat, nccl, shell, smi, smi_query
from remediator.sim.node.hardware import DRIVER_VERSION, Profile, pci_bus_id
from remediator.sim.telemetry.exporters import Inventory

if TYPE_CHECKING:
    from remediator.sim.rack.fabric import TrayFabric

DCGM_VERSION = "3.3.5"
RESET_SECONDS = 0.3
DIAG_SECONDS = {1: 0.5, 2: 1.0, 3: 2.0, 4: 3.0}
REBOOT_COMMAND_SECONDS = 0.2
SMI_SECONDS = 0.1
IBSTAT_SECONDS = 0.1
ALL_REDUCE_SECONDS = 1.0
FM_UNIT = "nvidia-fabricmanager"
# (category, test, per GPU) by the level that first runs it.
DIAG_TESTS: dict[int, tuple[tuple[str, str, bool], ...]] = {
    1: (
        ("Deployment", "Denylist", False),
        ("Deployment", "NVML Library", False),
        ("Deployment", "CUDA Main Library", False),
        ("Deployment", "Permissions and OS Blocks", False),
        ("Deployment", "Persistence Mode", False),
        ("Deployment", "Environment Variables", False),
        ("Deployment", "Page Retirement/Row Remap", True),
        ("Deployment", "Graphics Processes", False),
        ("Deployment", "Inforom", True),
    ),
    2: (("Integration", "PCIe", True), ("Hardware", "GPU Memory", True)),
    3: (
        ("Stress", "Targeted Stress", True),
        ("Stress", "Targeted Power", True),
        ("Stress", "Memory Bandwidth", True),
        ("Hardware", "Diagnostic", True),
    ),
    4: (("Hardware", "Pulse Test", True), ("Stress", "Memtest", True)),
}


class NodeRepairs(Protocol):
    def reset_gpu(self, node: str, gpu: int) -> str | None:
        """Reset one GPU; None when it worked, else the error nvidia-smi prints."""
        ...

    def reboot(self, node: str) -> None: ...

    def faulty_gpus(self, node: str) -> Mapping[int, str]:
        """GPU index → what is wrong with it, for the GPUs that still carry a fault."""
        ...

    def gpu_count(self, node: str) -> int: ...

    def inventory(self, node: str) -> Inventory:
        """The machine's hardware profile and which of its parts are gone or down now."""
        ...


def raw_command(pod: Mapping[str, Any]) -> list[str]:
    """The first container's command and args, as the runtime would exec them."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return []
    first = containers[0]
    return [str(a) for a in (first.get("command") or []) + (first.get("args") or [])]


def container_command(pod: Mapping[str, Any]) -> list[str]:
    """The first container's command and args as one argv (a `sh -c` script is split too)."""
    argv = raw_command(pod)
    if len(argv) >= 3 and argv[0].endswith("sh") and argv[1] == "-c":
        try:
            return shlex.split(argv[2])
        except ValueError:
            return argv
    return argv


def _option(argv: Sequence[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
        for name in names:
            if name.startswith("--") and arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def diag_report(
    level: int, gpus: int, faulty: Mapping[int, str], profile: Profile | None = None
) -> dict[str, Any]:
    """The `dcgmi diag -r LEVEL -j` document for a node whose `faulty` GPUs fail."""
    categories: dict[str, list[dict[str, Any]]] = {}
    for lvl in range(1, level + 1):
        for category, test, per_gpu in DIAG_TESTS[lvl]:
            if per_gpu:
                results = []
                for gpu in range(gpus):
                    entry: dict[str, Any] = {"gpu_ids": str(gpu), "status": "Pass"}
                    if gpu in faulty:
                        entry["status"] = "Fail"
                        entry["warnings"] = [
                            {
                                "warning": f"GPU {gpu} ({pci_bus_id(gpu)}): {faulty[gpu]}",
                                "error_id": 83,
                                "error_category": 4,
                                "error_severity": 2,
                            }
                        ]
                    results.append(entry)
            else:
                results = [{"status": "Pass"}]
            categories.setdefault(category, []).append({"name": test, "results": results})
    report: dict[str, Any] = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {"category": name, "tests": tests} for name, tests in categories.items()
            ],
            "version": DCGM_VERSION,
        },
        "Driver Version Detected": profile.driver_version if profile else DRIVER_VERSION,
        "GPU Device IDs": [profile.spec.device_id if profile else "2330"] * gpus,
    }
    if profile is not None:
        report["GPU Device Serials"] = {str(g.index): g.serial for g in profile.gpus[:gpus]}
    return report


class HostPrograms:
    """`time_scale` multiplies every program's run time: 1 keeps the times above (the demo's),
    a test that is not about how long checks take runs them faster. A `sh -c` script of several
    statements runs its programs one after another (sim/node/shell.py), its `date` read from
    `clock` at the container's start plus the programs' run time so far."""

    def __init__(
        self,
        repairs: NodeRepairs,
        fabric: Callable[[str], TrayFabric | None] | None = None,
        time_scale: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self._repairs = repairs
        self._fabric = fabric  # an NVL72 tray's view of its rack's fabric (sim/rack/fabric.py)
        self._time_scale = time_scale
        self._clock = clock or SystemClock()

    def run(self, pod: Mapping[str, Any], node: str) -> ProgramRun | None:
        raw = raw_command(pod)
        if shell.is_script(raw):
            return shell.run(raw[2], lambda argv: self._scaled(argv, node), self._clock.now())
        return self._scaled(container_command(pod), node)

    def _scaled(self, argv: Sequence[str], node: str) -> ProgramRun | None:
        found = self._run(argv, node)
        if found is None or self._time_scale == 1.0:
            return found
        return dataclasses.replace(found, seconds=found.seconds * self._time_scale)

    def _run(self, argv: Sequence[str], node: str) -> ProgramRun | None:
        words = [a.rsplit("/", 1)[-1] for a in argv]
        if "nvidia-smi" in words and any(a in ("--gpu-reset", "-r") for a in argv):
            return self._reset(argv, node)
        if "dcgmi" in words and "diag" in argv:
            return self._diag(argv, node)
        if "nvidia-smi" in words and any(a in ("-q", "--query") for a in argv):
            fabric = self._fabric(node) if self._fabric else None
            inventory = self._repairs.inventory(node)
            text = smi_query.report(inventory.profile, self._present(inventory), fabric)
            return ProgramRun(0, text, SMI_SECONDS)
        if "nvidia-smi" in words:
            return self._smi(argv[words.index("nvidia-smi") :], node)
        if "systemctl" in words and "is-active" in argv and FM_UNIT in argv:
            return self._fabric_manager(node)
        if "mpirun" in words and "all_reduce_perf" in words:
            return self._mpi_all_reduce(argv, words, node)
        if "all_reduce_perf" in words:
            return self._all_reduce(argv[words.index("all_reduce_perf") :], node)
        if "ibstat" in words:
            return self._ibstat(argv[words.index("ibstat") :], node)
        if any(w in ("reboot", "systemctl") for w in words) and "reboot" in argv:
            return self._reboot(node)
        if any(re.fullmatch(r"echo\s+b\s*>\s*/proc/sysrq-trigger", a) for a in argv):
            return self._reboot(node)
        return None

    def _reset(self, argv: Sequence[str], node: str) -> ProgramRun:
        raw = _option(argv, "-i", "--id")
        if raw is None or not raw.isdigit():
            return ProgramRun(2, "Reset requires a target GPU: use -i/--id\n", RESET_SECONDS)
        gpu = int(raw)
        if gpu >= self._repairs.gpu_count(node):
            return ProgramRun(6, f"No devices were found matching id {gpu}\n", RESET_SECONDS)
        error = self._repairs.reset_gpu(node, gpu)
        if error is not None:
            return ProgramRun(3, f"Unable to reset GPU {pci_bus_id(gpu)}: {error}\n", RESET_SECONDS)
        text = f"GPU {pci_bus_id(gpu)} was successfully reset.\nAll done.\n"
        return ProgramRun(0, text, RESET_SECONDS)

    def _diag(self, argv: Sequence[str], node: str) -> ProgramRun:
        raw = _option(argv, "-r", "--run") or "1"
        names = {"quick": "1", "short": "1", "medium": "2", "long": "3", "xlong": "4"}
        raw = names.get(raw, raw)
        level = int(raw) if raw in ("1", "2", "3", "4") else 1
        report = diag_report(
            level,
            self._repairs.gpu_count(node),
            self._repairs.faulty_gpus(node),
            self._repairs.inventory(node).profile,
        )
        # dcgmi prints the JSON and exits non-zero when a test failed (DCGM_ST_NVVS_ERROR).
        failed = any(node_fails(report))
        output = json.dumps(report, indent=4) + "\n"
        return ProgramRun(226 if failed else 0, output, DIAG_SECONDS[level])

    def _present(self, inventory: Inventory) -> list[int]:
        return [g.index for g in inventory.profile.gpus if g.index not in inventory.absent_gpus]

    def _smi(self, argv: Sequence[str], node: str) -> ProgramRun:
        inventory = self._repairs.inventory(node)
        result = smi.run(argv, inventory.profile, self._present(inventory))
        return ProgramRun(result.exit_code, result.output, SMI_SECONDS)

    def _all_reduce(self, argv: Sequence[str], node: str) -> ProgramRun:
        inventory = self._repairs.inventory(node)
        result = nccl.run(argv, inventory.profile, self._present(inventory), node)
        return ProgramRun(result.exit_code, result.output, ALL_REDUCE_SECONDS)

    def _mpi_all_reduce(self, argv: Sequence[str], words: Sequence[str], node: str) -> ProgramRun:
        """`mpirun -np N -H a:S,b:S all_reduce_perf ...` launched from `node`: every host
        must be a node the cluster has (mpirun's ssh to it fails otherwise); the ranks must
        fill the slots."""
        program = words.index("all_reduce_perf")
        launch = argv[:program]
        raw_hosts = _option(launch, "-H", "--host", "-host") or f"{node}:1"
        hosts: list[tuple[nccl.Host, int]] = []
        for entry in raw_hosts.split(","):
            name, _, slots = entry.partition(":")
            try:
                inventory = self._repairs.inventory(name)
            except LookupError:  # no such node (the telemetry's UnknownNode)
                text = (
                    f"ssh: Could not resolve hostname {name}: Name or service not known\n"
                    "ORTE was unable to reliably start one or more daemons.\n"
                )
                return ProgramRun(1, text, SMI_SECONDS)
            up = sum(1 for p in inventory.profile.ib_ports if p.device not in inventory.down_ports)
            host = nccl.Host(name, inventory.profile, self._present(inventory), up)
            hosts.append((host, int(slots) if slots.isdigit() else 1))
        np_raw = _option(launch, "-np", "-n", "--np")
        if np_raw is not None and np_raw.isdigit() and int(np_raw) != sum(s for _, s in hosts):
            text = (
                f"There are not enough slots available in the system to satisfy the {np_raw}\n"
                "slots that were requested by the application.\n"
            )
            return ProgramRun(1, text, SMI_SECONDS)
        result = nccl.run_multi(argv[program:], hosts)
        return ProgramRun(result.exit_code, result.output, ALL_REDUCE_SECONDS)

    def _ibstat(self, argv: Sequence[str], node: str) -> ProgramRun:
        inventory = self._repairs.inventory(node)
        result = ibstat.run(argv, inventory.profile, inventory.down_ports)
        return ProgramRun(result.exit_code, result.output, IBSTAT_SECONDS)

    def _fabric_manager(self, node: str) -> ProgramRun:
        """`systemctl is-active nvidia-fabricmanager`: exit 0 and "active", else 3 and
        "failed" (after a fatal NVSwitch error) or "inactive" (a node without the service)."""
        fabric = self._fabric(node) if self._fabric else None
        if fabric is None:
            return ProgramRun(3, "inactive\n", SMI_SECONDS)
        if fabric.fm_active:
            return ProgramRun(0, "active\n", SMI_SECONDS)
        return ProgramRun(3, "failed\n", SMI_SECONDS)

    def _reboot(self, node: str) -> ProgramRun:
        def down() -> None:
            self._repairs.reboot(node)

        return ProgramRun(0, "Rebooting.\n", REBOOT_COMMAND_SECONDS, down)


def node_fails(report: Mapping[str, Any]) -> list[bool]:
    diag = report.get("DCGM GPU Diagnostic") or {}
    return [
        r.get("status") == "Fail"
        for c in diag.get("test_categories") or []
        for t in c.get("tests") or []
        for r in t.get("results") or []
    ]
