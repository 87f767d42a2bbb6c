"""The NVLink fabric of simulated NVL72 racks: NVSwitch faults (SXids), rack power, Fabric
Manager's state, and what each compute tray sees of them — the driver's SXid lines, Fabric
Manager's log, `systemctl is-active nvidia-fabricmanager`, `nvidia-smi -q`'s Fabric section and
DCGM's per-link NVLink fields.

Each GPU of a tray has 18 NVLinks, two to each of the rack's 9 NVSwitch trays (links 2k and
2k+1 go to switch tray k). A fatal SXid on switch tray k takes those links down on every GPU of
the rack and Fabric Manager stops (`failed`): the whole NVLink domain is degraded until the rack
is repaired. A non-fatal one counts errors on those links and changes nothing else.

The formats are the driver's and Fabric Manager's own:
`nvidia-nvswitch{N}: SXid (PCI:{dddd:bb:dd.f}): {code}, {Fatal|Non-fatal}, {text}` in the kernel
log, `[{Mon DD YYYY HH:MM:SS}] [ERROR] [tid {T}] detected NVSwitch {fatal|non-fatal} error {code}
on fid 0 on NVSwitch pci bus id {dddddddd:bb:dd.f} physical id {N} port {P}` in its log."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from remediator.sim.rack.topology import (
    NVLINKS_PER_GPU,
    SWITCH_TRAYS_PER_RACK,
    Rack,
    parse_tray_name,
)

# The SXid texts the driver prints for the codes a fleet meets (NVIDIA's Fabric Manager guide,
# appendix D); any other code prints as a generic link error.
SXID_TEXT: dict[int, str] = {
    11004: "ingress invalid ACL (First)",
    12020: "egress sequence ID error",
    12028: "egress non-posted PRIV error (First)",
    20034: "LTSSM Fault Up",
    22013: "Minion Link DLREQ interrupt",
}
FM_LOG = "var/log/fabricmanager.log"
FM_SERVICE = "nvidia-fabricmanager"
PORTS_PER_SWITCH = 72
# DCGM_FI_DEV_NVLINK_GET_STATE (NVML_FI_DEV_NVLINK_GET_STATE): 1 active, 0 inactive.
LINK_UP, LINK_DOWN = 1, 0
# NVML_GPU_FABRIC_STATE_*: what DCGM_FI_DEV_FABRIC_MANAGER_STATUS reports.
FABRIC_COMPLETED, FABRIC_NOT_STARTED = 3, 1


def sxid_text(code: int, link: int) -> str:
    return f"Link {link} {SXID_TEXT.get(code, 'internal error')}"


def switch_pci(chip: int) -> str:
    """An NVSwitch chip's PCI address as DCGM and Fabric Manager print it."""
    return f"00000000:{0x86 + chip:02x}:00.0"


@dataclass(frozen=True)
class SxidEvent:
    rack: int
    switch: int  # the switch tray, 0-8
    chip: int  # the NVSwitch chip in the rack, nvidia-nvswitch{chip}
    code: int
    fatal: bool
    link: int  # the switch port the error names
    at: datetime

    def kernel_lines(self) -> list[str]:
        pci = switch_pci(self.chip)[4:]
        head = f"nvidia-nvswitch{self.chip}: SXid (PCI:{pci}): {self.code}"
        severity = "Fatal" if self.fatal else "Non-fatal"
        return [
            f"{head}, {severity}, {sxid_text(self.code, self.link)}",
            f"{head}, Severity {1 if self.fatal else 0} Engine instance {self.link} "
            "Sub-engine instance 00",
        ]

    def fabric_manager_line(self, tid: int) -> str:
        kind = "fatal" if self.fatal else "non-fatal"
        return (
            f"{fm_stamp(self.at)} [ERROR] [tid {tid}] detected NVSwitch {kind} error {self.code} "
            f"on fid 0 on NVSwitch pci bus id {switch_pci(self.chip)} physical id {self.chip} "
            f"port {self.link}"
        )


def fm_stamp(when: datetime) -> str:
    return when.strftime("[%b %d %Y %H:%M:%S]")


@dataclass
class RackFabric:
    rack: Rack
    events: list[SxidEvent] = field(default_factory=list)
    powered: bool = True
    generation: int = 0  # replacements of the whole rack: new switch trays, new serials

    def failed_switches(self) -> set[int]:
        return {e.switch for e in self.events if e.fatal}

    def link_errors(self, switch: int) -> int:
        return sum(1 for e in self.events if e.switch == switch and not e.fatal)


@dataclass(frozen=True)
class TrayFabric:
    """What one tray's GPUs report of the fabric."""

    rack: Rack
    slot: int
    clique: int
    cluster_uuid: str
    fm_active: bool
    links_down: frozenset[int]  # link indices, the same on every GPU of the rack
    link_errors: dict[int, int]  # link index -> CRC flit errors counted

    @property
    def healthy(self) -> bool:
        return self.fm_active and not self.links_down


class UnknownRack(LookupError):
    pass


class Fabric:
    """Thread-safe: the inject app changes it while the metrics app and host programs read."""

    def __init__(self, racks: list[Rack], clock_now: Callable[[], datetime]) -> None:
        self._racks = {r.index: RackFabric(r) for r in racks}
        self.now = clock_now
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    @property
    def racks(self) -> list[Rack]:
        return [state.rack for state in self._racks.values()]

    def rack(self, index: int) -> Rack:
        state = self._racks.get(index)
        if state is None:
            raise UnknownRack(f"rack {index} does not exist (racks 0-{len(self._racks) - 1})")
        return state.rack

    def trays(self, index: int) -> list[str]:
        return [t.name for t in self.rack(index).trays]

    def sxid(self, rack: int, switch: int, code: int, fatal: bool) -> SxidEvent:
        self.rack(rack)
        if not 0 <= switch < SWITCH_TRAYS_PER_RACK:
            raise ValueError(f"switch must be 0-{SWITCH_TRAYS_PER_RACK - 1}, not {switch}")
        event = SxidEvent(
            rack=rack,
            switch=switch,
            chip=2 * switch,
            code=code,
            fatal=fatal,
            link=(code + 7 * switch) % PORTS_PER_SWITCH,
            at=self.now(),
        )
        with self._lock:
            self._racks[rack].events.append(event)
        self._changed()
        return event

    def set_power(self, rack: int, on: bool) -> None:
        self.rack(rack)
        with self._lock:
            self._racks[rack].powered = on
        self._changed()

    def powered(self, rack: int) -> bool:
        with self._lock:
            return self._racks[rack].powered

    def repair(self, rack: int, replace: bool = False) -> None:
        """The rack's switch trays repaired (or all its trays replaced): the fabric is whole."""
        self.rack(rack)
        with self._lock:
            state = self._racks[rack]
            state.events.clear()
            state.powered = True
            if replace:
                state.generation += 1
        self._changed()

    def switch_serial(self, rack: int, switch: int) -> str:
        with self._lock:
            generation = self._racks[rack].generation
        return f"1652824{rack:03d}{switch:02d}{generation:02d}"

    def active(self) -> list[dict[str, object]]:
        """The racks' faults, as the inject API lists them."""
        out: list[dict[str, object]] = []
        with self._lock:
            for index, state in sorted(self._racks.items()):
                if not state.powered:
                    out.append({"type": "rack_power", "rack": index})
                for e in state.events:
                    out.append(
                        {
                            "type": "sxid",
                            "rack": index,
                            "switch": e.switch,
                            "code": e.code,
                            "fatal": e.fatal,
                        }
                    )
        return out

    def tray(self, node: str) -> TrayFabric | None:
        """The fabric as `node`'s GPUs see it; None for a node that is no NVL72 tray."""
        where = parse_tray_name(node)
        if where is None or where[0] not in self._racks:
            return None
        rack_index, slot = where
        with self._lock:
            state = self._racks[rack_index]
            failed = state.failed_switches()
            errors = {
                link: count
                for switch in range(SWITCH_TRAYS_PER_RACK)
                if (count := state.link_errors(switch))
                for link in (2 * switch, 2 * switch + 1)
            }
        tray = state.rack.trays[slot]
        down = frozenset(link for s in failed for link in (2 * s, 2 * s + 1))
        return TrayFabric(
            rack=state.rack,
            slot=slot,
            clique=tray.clique,
            cluster_uuid=state.rack.cluster_uuid,
            fm_active=not failed,
            links_down=down,
            link_errors=errors,
        )

    def link_state(self, node: str, link: int) -> int:
        tray = self.tray(node)
        if tray is None or not 0 <= link < NVLINKS_PER_GPU:
            return LINK_DOWN
        return LINK_DOWN if link in tray.links_down else LINK_UP
