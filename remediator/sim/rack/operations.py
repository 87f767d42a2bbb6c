"""A whole NVL72 rack repaired or replaced as one node-pool operation
(`POST /v1/pools/{pool}/racks/{rack}/repair` and `/replace`): repair mends its NVSwitch trays
and power-cycles its 18 compute trays (same machines, a new boot); replace swaps every tray,
switch and compute, for new hardware at the same slots under the same names (new Node objects,
new GPU identities, the rack's spares spare again). The operation is done once every compute
tray is Ready again; the caller follows it at `GET /v1/operations/{id}` like a replacement."""

from __future__ import annotations

from typing import Protocol

from remediator.sim.kube.api.store import Obj, ObjectStore
from remediator.sim.rack.fabric import Fabric
from remediator.sim.rack.topology import GPUS_PER_TRAY, POOL, tray_labels, tray_taints

ACTIONS = ("repair", "replace")


class RackCluster(Protocol):
    store: ObjectStore

    def reboot_node(self, name: str, down_seconds: float) -> None: ...

    def remove_node(self, name: str) -> None: ...

    def add_node(
        self,
        name: str,
        pool: str,
        gpus: int,
        labels: dict[str, str] | None = None,
        ready_after: float = 0.0,
        taints: list[Obj] | None = None,
    ) -> Obj: ...


def rack_index(name: str) -> int | None:
    """`rack-3` (the rack label's value) or `3`; None for anything else."""
    raw = name.removeprefix("rack-")
    return int(raw) if raw.isdigit() and len(raw) <= 6 else None


class RackOperations:
    def __init__(self, cluster: RackCluster, fabric: Fabric) -> None:
        self._cluster = cluster
        self._fabric = fabric

    def trays(self, rack: str) -> list[str] | None:
        """The compute trays of `rack`, None for a rack that does not exist."""
        index = rack_index(rack)
        if index is None or index not in {r.index for r in self._fabric.racks}:
            return None
        return self._fabric.trays(index)

    def start(self, rack: str, action: str, delay: float) -> None:
        index = rack_index(rack)
        assert index is not None and action in ACTIONS
        self._fabric.repair(index, replace=action == "replace")
        if action == "repair":
            for name in self._fabric.trays(index):
                self._cluster.reboot_node(name, delay)
            return
        for tray in self._fabric.rack(index).trays:
            if self._cluster.store.find("nodes", "", tray.name) is not None:
                self._cluster.remove_node(tray.name)
            self._cluster.add_node(
                tray.name,
                POOL,
                GPUS_PER_TRAY,
                tray_labels(tray),
                ready_after=delay,
                taints=tray_taints(tray),
            )
