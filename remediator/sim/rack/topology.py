"""An NVL72 rack's layout: GB200 NVL72 racks, each one NVLink domain of 18 four-GPU compute trays
(the Nodes) joined by 9 NVSwitch trays (simulator objects, not Nodes); the labels GPU feature
discovery and the rack labeller put on each tray; the last trays of each rack held back as spares.
Derived from its arguments alone: every run of the same size is the same racks (cluster UUIDs and
serials included)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from remediator.sim.cloud.nodepool import Position, Positions
from remediator.sim.kube.api.store import Obj

TOPOLOGIES = ("default", "nvl72")
POOL = "gb200-nvl72"
TRAYS_PER_RACK = 18
SWITCH_TRAYS_PER_RACK = 9
GPUS_PER_TRAY = 4
NVLINKS_PER_GPU = 18  # fifth-generation NVLink: 18 links per Blackwell GPU, two per switch tray
GPU_MODEL = "NVIDIA GB200"

CLIQUE_LABEL = "nvidia.com/gpu.clique"
RACK_LABEL = "remediator.io/rack"
TRAY_LABEL = "remediator.io/tray"
SPARE_LABEL = "remediator.io/spare"
GANG_JOB_LABEL = "remediator.io/gang"
SPARE_TAINT: Obj = {"key": SPARE_LABEL, "value": "true", "effect": "NoSchedule"}
NAMESPACES = (
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "gpu-operator",
    "training",
)

_UUID_NAMESPACE = uuid.UUID("0c6f7a3e-4f3b-4c55-9d0e-6a8e1f2b9c41")
_TRAY_NAME = re.compile(r"^nvl-r(\d+)-t(\d{2})$")


@dataclass(frozen=True)
class Tray:
    rack: int
    slot: int
    clique: int
    spare: bool

    @property
    def name(self) -> str:
        return tray_name(self.rack, self.slot)


@dataclass(frozen=True)
class SwitchTray:
    """An NVSwitch tray: two NVSwitch chips, each a PCI function of the trays' driver view
    (`nvidia-nvswitch{N}` in the kernel log counts the rack's switch chips)."""

    rack: int
    index: int

    @property
    def serial(self) -> str:
        return f"1652824{self.rack:03d}{self.index:03d}"

    def chips(self) -> tuple[int, int]:
        return 2 * self.index, 2 * self.index + 1


@dataclass(frozen=True)
class Rack:
    index: int
    trays: tuple[Tray, ...]
    switches: tuple[SwitchTray, ...]

    @property
    def name(self) -> str:
        return f"rack-{self.index}"

    @property
    def cluster_uuid(self) -> str:
        return cluster_uuid(self.index)

    @property
    def chassis_serial(self) -> str:
        return f"1821324{self.index:06d}"

    def cliques(self) -> list[int]:
        return sorted({t.clique for t in self.trays})


def tray_name(rack: int, slot: int) -> str:
    return f"nvl-r{rack}-t{slot:02d}"


def parse_tray_name(name: str) -> tuple[int, int] | None:
    """(rack, slot) of a tray's Node name, None for any other node."""
    found = _TRAY_NAME.match(name)
    return (int(found.group(1)), int(found.group(2))) if found else None


def cluster_uuid(rack: int) -> str:
    """The NVLink domain's fabric cluster UUID, as Fabric Manager assigns it: one per rack."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"nvl72-rack-{rack}"))


def clique_value(rack: int, clique: int) -> str:
    return f"{cluster_uuid(rack)}.{clique}"


def gang_name(rack: int, clique: int) -> str:
    return f"gang-r{rack}-c{clique}"


def clique_of_slot(slot: int, cliques: int) -> int:
    """Cliques are contiguous runs of slots, as even as 18 trays split K ways allows."""
    return slot * cliques // TRAYS_PER_RACK


def layout(racks: int, cliques_per_rack: int = 1, spare_trays: int = 2) -> list[Rack]:
    if racks < 1:
        raise ValueError(f"racks must be at least 1, not {racks}")
    if not 1 <= cliques_per_rack <= TRAYS_PER_RACK:
        raise ValueError(f"cliques per rack must be 1 to {TRAYS_PER_RACK}, not {cliques_per_rack}")
    if not 0 <= spare_trays < TRAYS_PER_RACK:
        raise ValueError(f"spare trays must be 0 to {TRAYS_PER_RACK - 1}, not {spare_trays}")
    out = []
    for r in range(racks):
        trays = tuple(
            Tray(r, s, clique_of_slot(s, cliques_per_rack), s >= TRAYS_PER_RACK - spare_trays)
            for s in range(TRAYS_PER_RACK)
        )
        switches = tuple(SwitchTray(r, k) for k in range(SWITCH_TRAYS_PER_RACK))
        out.append(Rack(r, trays, switches))
    return out


def tray_labels(tray: Tray) -> dict[str, str]:
    labels = {
        CLIQUE_LABEL: clique_value(tray.rack, tray.clique),
        RACK_LABEL: f"rack-{tray.rack}",
        TRAY_LABEL: str(tray.slot),
    }
    if tray.spare:
        labels[SPARE_LABEL] = "true"
    return labels


def tray_taints(tray: Tray) -> list[Obj]:
    return [dict(SPARE_TAINT)] if tray.spare else []


def positions(racks: list[Rack]) -> Positions:
    """A replaced tray comes back at its slot under its name, with new hardware, as the rack's
    spare: the spare it stood in for has taken its place in the gang meanwhile."""
    trays = {t.name: t for rack in racks for t in rack.trays}

    def place(name: str) -> Position | None:
        tray = trays.get(name)
        if tray is None:
            return None
        spare = Tray(tray.rack, tray.slot, tray.clique, spare=True)
        return Position(name, tray_labels(spare), tray_taints(spare))

    return place
