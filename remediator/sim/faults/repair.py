"""What a GPU reset and a reboot repair on a simulated node: faults injected as transient go,
faults injected `persistent` (broken hardware) stay, so diagnostics afterwards still fail.

`FaultRepairs` is what the host programs (remediator/sim/node/programs.py) and the node-pool
API's reboot call act through."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from remediator.sim.faults.inject import ClearFault, FaultInjector, GpuMissingFault, XidFault
from remediator.sim.kube.controllers.cluster import SimCluster
from remediator.sim.telemetry.exporters import Inventory, Telemetry, xid_message

DEFAULT_REBOOT_SECONDS = 5.0


class FaultRepairs:
    def __init__(
        self,
        cluster: SimCluster,
        telemetry: Telemetry,
        reboot_seconds: float = DEFAULT_REBOOT_SECONDS,
    ) -> None:
        self._cluster = cluster
        self._telemetry = telemetry
        self._injector: FaultInjector | None = None
        self.reboot_seconds = reboot_seconds
        self._lock = threading.Lock()
        self._persistent: set[tuple[str, int]] = set()

    def attach(self, injector: FaultInjector) -> None:
        self._injector = injector

    def applied(self, fault: object) -> None:
        """Called by the fault injector after each fault: remembers which ones are hardware."""
        with self._lock:
            if isinstance(fault, XidFault | GpuMissingFault):
                key = (fault.node, fault.gpu)
                if fault.persistent:
                    self._persistent.add(key)
                else:
                    self._persistent.discard(key)
            elif isinstance(fault, ClearFault):
                self._persistent = {
                    k
                    for k in self._persistent
                    if k[0] != fault.node or (fault.gpu is not None and k[1] != fault.gpu)
                }

    def faulty_gpus(self, node: str) -> Mapping[int, str]:
        found: dict[int, str] = {}
        for fault in self._telemetry.active_faults():
            if fault.get("node") != node or fault.get("gpu") is None:
                continue
            gpu = int(fault["gpu"])
            if fault["type"] == "xid":
                found[gpu] = f"XID {fault['code']} ({xid_message(int(fault['code']))})"
            elif fault["type"] == "gpu_missing":
                found[gpu] = "GPU is not visible to the driver"
            else:
                found.setdefault(gpu, f"{fault['type']} fault")
        return found

    def gpu_count(self, node: str) -> int:
        return len(self._telemetry.node(node).gpus)

    def inventory(self, node: str) -> Inventory:
        return self._telemetry.inventory(node)

    def _clear_transient(self, node: str, gpus: list[int]) -> None:
        assert self._injector is not None, "attach the fault injector first"
        with self._lock:
            keep = {g for n, g in self._persistent if n == node}
        for gpu in gpus:
            if gpu not in keep:
                self._injector.apply(ClearFault(type="clear", node=node, gpu=gpu))

    def reset_gpu(self, node: str, gpu: int) -> str | None:
        faulty = self.faulty_gpus(node)
        if faulty.get(gpu) == "GPU is not visible to the driver":
            return "GPU not found"
        self._clear_transient(node, [gpu] if gpu in faulty else [])
        return None

    def reboot(self, node: str) -> None:
        """The host goes down now; transient faults are gone when it comes back."""
        self._cluster.reboot_node(node, self.reboot_seconds)
        self._clear_transient(node, sorted(self.faulty_gpus(node)))
