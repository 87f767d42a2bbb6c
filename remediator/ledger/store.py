"""The ledger's tables: sightings of machines and GPUs become placements (written only when
something changed, from an in-memory picture of each node), signals, remediations and verdicts
become links to the hardware they concern, and a second UUID at one PCI address is a conflict.

One `Ledger` per controller (per cluster); GPUs and machines are fleet-wide, so a GPU that moves
to another cluster keeps its history. Its queries are the narrow questions policies and pages
ask ("which remediations concerned this GPU since T"), never a table for the caller to join.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Table, bindparam, func, insert, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.ledger.hold import REPLACED, VALIDATION_FAILED, Strike
from remediator.ledger.identity import (
    DMI_RANK,
    GpuIdentity,
    HostHardware,
    dmi_serial,
    lineage,
    machine_id,
    pci,
    rank,
)
from remediator.signals.model import Signal
from remediator.store.db import session_scope
from remediator.store.models import (
    LedgerConflict,
    LedgerGpu,
    LedgerLink,
    LedgerMachine,
    LedgerPlacement,
)

SIGNAL, REMEDIATION, VERDICT = "signal", "remediation", "verdict"
# A machine taken out by a replacement; a hold put on, lifted or enforced on a node (kind
# "held" / "lifted" / "fenced").
REPLACEMENT, HOLD = "replaced", "hold"
# A machine seen under a node name (or cluster) it was not under before: its placement history.
PLACED = "placed"
FENCED = "fenced"  # a hold's node fenced on arrival (a quarantined machine under a new name)
VALIDATE = "validate"  # a verdict's `step` that makes a failed one a strike
# Labels that carry a GPU's PCI address: the agent's kernel-log XID, DCGM exporter's.
PCI_LABELS = ("pci", "pci_bus_id")
MODEL_LABEL = "modelName"  # DCGM exporter's
# A link's detail: the GPU's index, while no sighting has named the GPU at it (`_name_index`).
GPU_INDEX = "gpu_index"
DMI_LABEL = "dmi_serial"  # the agent's (agent/identity.py), with gpu_serial and vbios


@dataclass(frozen=True, slots=True)
class Placement:
    gpu_uuid: str
    machine_id: str | None
    cluster: str
    node: str
    pci_bus_id: str | None
    gpu_index: int | None
    from_at: datetime
    to_at: datetime | None


@dataclass(frozen=True, slots=True)
class Link:
    cluster: str
    subject: str
    ref_id: int | None
    node: str
    gpu_uuid: str | None
    machine_id: str | None
    kind: str
    code: int | None
    detail: dict[str, Any]
    at: datetime


@dataclass(frozen=True, slots=True)
class Conflict:
    cluster: str
    node: str
    machine_id: str | None
    pci_bus_id: str
    known_uuid: str
    seen_uuid: str
    at: datetime


@dataclass(frozen=True, slots=True)
class GpuSummary:
    uuid: str
    serial: str | None
    model: str | None
    vbios: str | None
    driver: str | None
    first_seen_at: datetime
    last_seen_at: datetime
    faults: int


@dataclass(frozen=True)
class GpuLife:
    gpu: GpuSummary
    placements: tuple[Placement, ...]
    links: tuple[Link, ...]
    conflicts: tuple[Conflict, ...]

    @property
    def faults_by_xid(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for link in self.links:
            if link.subject == SIGNAL and link.kind == "xid" and link.code is not None:
                counts[link.code] = counts.get(link.code, 0) + 1
        return dict(sorted(counts.items()))


@dataclass(frozen=True)
class MachineLife:
    id: str
    provider_id: str | None
    dmi_serial: str | None
    cluster: str
    node: str
    first_seen_at: datetime
    last_seen_at: datetime
    quarantined_at: datetime | None
    quarantine_reason: str | None
    quarantined_by: int | None
    hold_lifted_at: datetime | None
    placements: tuple[Placement, ...]
    links: tuple[Link, ...]


@dataclass(frozen=True, slots=True)
class MachineSeen:
    """A machine seen behind a node name, with what named it."""

    machine: str
    at: datetime
    provider_id: str | None = None
    dmi_serial: str | None = None


# A GPU UUID as the picture keeps it (`_key`): NVIDIA's spelling as a 128-bit int, 48 bytes where
# the string is 96 (80,000 of them at 10,000 nodes, in the picture and in `_where`); any other
# spelling as given.
GpuKey = str | int


def _key(uuid: str) -> GpuKey:
    """`GPU-` and 32 lowercase hex digits in 8-4-4-4-12 as an int; any other spelling as given
    (only what `_name` spells back the same is turned into an int)."""
    if len(uuid) == 40 and uuid.startswith("GPU-"):
        try:
            value = int(uuid[4:].replace("-", ""), 16)
        except ValueError:
            return uuid
        if _name(value) == uuid:
            return value
    return uuid


def _name(key: GpuKey) -> str:
    """The UUID a `_key` stands for."""
    if isinstance(key, str):
        return key
    digits = f"{key:032x}"
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


# A fleet's nodes share a few hardware layouts (PCI addresses, indexes): one tuple each.
_LAYOUTS: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_MAX_LAYOUTS = 4096


def _shared(layout: tuple[Any, ...]) -> tuple[Any, ...]:
    """The one tuple kept for this layout (bounded: past the bound, a tuple of its own)."""
    found = _LAYOUTS.get(layout)
    if found is not None:
        return found
    if len(_LAYOUTS) < _MAX_LAYOUTS:
        _LAYOUTS[layout] = layout
    return layout


class _NodePicture:
    """A node's machine and its open placements: one entry per GPU slot, in parallel tuples.
    Each PCI address and each index names at most one entry (a later entry takes it from an
    earlier one), as two dicts keyed by them did; an entry named by neither is dropped. Slot
    objects in two dicts per node were ~2 KB a node at 8 GPUs; these tuples are a few hundred
    bytes beside the UUIDs, and the nodes of one hardware layout share `pcis` and `indexes`.
    `facts` is a fingerprint (`facts_of`) of what the ledger holds of the GPUs' serials, models,
    VBIOS and drivers, so a report of the same facts is one comparison, not a read."""

    __slots__ = ("facts", "indexes", "machine", "pcis", "since", "uuids")

    def __init__(self, machine: str | None = None) -> None:
        self.machine = machine
        self.facts: int | None = None
        self.uuids: tuple[GpuKey, ...] = ()  # see `_key`
        self.pcis: tuple[str | None, ...] = ()
        self.indexes: tuple[int | None, ...] = ()
        # One time for the entries when they share it (a node's GPUs arrive together).
        self.since: datetime | tuple[datetime, ...] = ()

    def by_pci(self, address: str) -> int | None:
        return self.pcis.index(address) if address in self.pcis else None

    def by_index(self, index: int) -> int | None:
        return self.indexes.index(index) if index in self.indexes else None

    def find(self, address: str | None, index: int | None) -> int | None:
        """The entry at the PCI address; at the index when no address is given."""
        if address is not None:
            return self.by_pci(address)
        return self.by_index(index) if index is not None else None

    def when(self, at: int) -> datetime:
        """Since when the entry's GPU sits there."""
        return self.since if isinstance(self.since, datetime) else self.since[at]

    def put(self, uuid: GpuKey, address: str | None, index: int | None, since: datetime) -> None:
        """A GPU at the address and/or index, taking them from whatever entry held them."""
        entries = [
            (u, None if p == address else p, None if i == index else i, self.when(k))
            for k, (u, p, i) in enumerate(zip(self.uuids, self.pcis, self.indexes, strict=True))
        ]
        entries.append((uuid, address, index, since))
        self._keep(entries)

    def drop(self, uuid: GpuKey) -> None:
        if uuid in self.uuids:
            entries = zip(self.uuids, self.pcis, self.indexes, strict=True)
            self._keep([(*e, self.when(k)) for k, e in enumerate(entries) if e[0] != uuid])

    def clear(self) -> None:
        self.uuids, self.pcis, self.indexes, self.since = (), (), (), ()
        self.facts = None

    def _keep(self, entries: list[tuple[GpuKey, str | None, int | None, datetime]]) -> None:
        # In one order whatever order the GPUs came in (agents send them by UUID): shared layouts.
        kept = sorted(
            (e for e in entries if e[1] is not None or e[2] is not None),
            key=lambda e: (e[2] is None, e[2] or 0, e[1] or ""),
        )
        self.uuids = tuple(e[0] for e in kept)
        self.pcis = _shared(tuple(e[1] for e in kept))
        self.indexes = _shared(tuple(e[2] for e in kept))
        times = tuple(e[3] for e in kept)
        self.since = times[0] if times and times.count(times[0]) == len(times) else times


def facts_of(gpus: Iterable[GpuIdentity]) -> int:
    """One int for the GPUs' facts (serial, model, VBIOS, driver), whatever their order: the
    same for the same report, and for a report of what the ledger holds."""
    return hash(tuple(sorted((g.uuid, *(getattr(g, f) or "" for f in _GPU_FIELDS)) for g in gpus)))


def _fingerprint(picture: _NodePicture | None, gpus: list[GpuIdentity]) -> None:
    if picture is not None:
        picture.facts = facts_of(gpus)


def _placement(row: LedgerPlacement) -> Placement:
    return Placement(
        row.gpu_uuid,
        row.machine_id,
        row.cluster,
        row.node,
        row.pci_bus_id,
        row.gpu_index,
        row.from_at,
        row.to_at,
    )


def _link(row: LedgerLink) -> Link:
    return Link(
        row.cluster,
        row.subject,
        row.ref_id,
        row.node,
        row.gpu_uuid,
        row.machine_id,
        row.kind,
        row.code,
        dict(row.detail or {}),
        row.at,
    )


def _conflict(row: LedgerConflict) -> Conflict:
    return Conflict(
        row.cluster, row.node, row.machine_id, row.pci_bus_id, row.known_uuid, row.seen_uuid, row.at
    )


def _chunks(keys: Sequence[str], size: int = 500) -> list[Sequence[str]]:
    """`IN` lists of at most `size`: SQLite's and PostgreSQL's parameter limits."""
    return [keys[start : start + size] for start in range(0, len(keys), size)]


def _news(picture: _NodePicture | None, machine: str) -> bool:
    """Whether `machine` behind the node is news to its picture (None: not loaded yet): another
    id of no lower rank (identity.rank: a cloud's instance id, then the agent's DMI serial, then
    a providerID), and not the providerID of a machine a replacement brought there
    (identity.brought_by: the Node cannot tell it from the tray before)."""
    if picture is None:
        return True
    known = picture.machine
    if known is not None and lineage(known) == machine:
        return False
    return known != machine and rank(machine) >= rank(known)


def _by_index(uuid: str | None, index: int | None) -> dict[str, int]:
    """A link's `gpu_index` when the GPU is known by its index alone (no UUID yet)."""
    return {GPU_INDEX: index} if uuid is None and index is not None else {}


def signal_pci(signal: Signal) -> str | None:
    for label in PCI_LABELS:
        if label in signal.labels:
            return pci(signal.labels[label])
    return None


# Core statements on the tables (no ORM objects): see _Writes.
_GPUS: Table = LedgerGpu.__table__  # type: ignore[assignment]
_PLACEMENTS: Table = LedgerPlacement.__table__  # type: ignore[assignment]
_CONFLICTS: Table = LedgerConflict.__table__  # type: ignore[assignment]
_MACHINES: Table = LedgerMachine.__table__  # type: ignore[assignment]
_LINKS: Table = LedgerLink.__table__  # type: ignore[assignment]
_GPU_COLUMNS = (LedgerGpu.serial, LedgerGpu.model, LedgerGpu.vbios, LedgerGpu.driver)
_GPU_FIELDS = ("serial", "model", "vbios", "driver")
_GPU_SET = ("last_seen_at", *_GPU_FIELDS)  # what a sighting updates
_MACHINE_COLUMNS = (
    LedgerMachine.cluster,
    LedgerMachine.node,
    LedgerMachine.last_seen_at,
    LedgerMachine.provider_id,
    LedgerMachine.dmi_serial,
)
_MACHINE_FIELDS = ("cluster", "node", "last_seen_at", "provider_id", "dmi_serial")
_WRITE_BATCH = 500  # rows pending before they are written
_LOAD_ROWS = 2000  # rows read at a time when the picture is loaded (not 80,000 at once)


def _gpu_rows(
    uuids: Sequence[str],
) -> Select[str, datetime, str | None, str | None, str | None, str | None]:
    """What a sighting compares and updates of these GPUs' rows."""
    return select(LedgerGpu.uuid, LedgerGpu.last_seen_at, *_GPU_COLUMNS).where(
        LedgerGpu.uuid.in_(uuids)
    )


class _Writes:
    """The rows one `_observe` writes, as Core statements of a few hundred rows each. As ORM
    objects, a flush of 500 nodes' first sightings (500 machines and links, 4,000 GPUs and
    placements) peaked at ~19 MB, and the allocator kept that peak as RSS for good (bench
    controller_memory). Written in foreign-key order (machines, links, GPUs, placements,
    conflicts) and before any statement that closes placements, as the ORM's autoflush did; a
    row is updated only when a value changed, as the ORM did."""

    def __init__(self) -> None:
        self.machines: dict[str, dict[str, Any]] = {}  # id → its row as stored (or to be)
        self.gpus: dict[str, dict[str, Any]] = {}  # UUID → its row as stored (or to be)
        self._inserted: set[str] = set()  # GPUs inserted here, their rows let go (read again)
        self._new: dict[Table, dict[str, dict[str, Any]]] = {_MACHINES: {}, _GPUS: {}}
        self._changed: dict[Table, dict[str, dict[str, Any]]] = {_MACHINES: {}, _GPUS: {}}
        self.links: list[dict[str, Any]] = []
        self.placements: list[dict[str, Any]] = []
        self.conflicts: list[dict[str, Any]] = []

    def machine(self, sight: MachineSeen, cluster: str, node: str) -> tuple[str, str] | None:
        """Record the machine under `node`; where it was before (None: a new machine)."""
        row = self.machines.get(sight.machine)
        if row is None:
            row = {
                "id": sight.machine,
                "provider_id": sight.provider_id,
                "dmi_serial": sight.dmi_serial,
                "cluster": cluster,
                "node": node,
                "first_seen_at": sight.at,
                "last_seen_at": sight.at,
            }
            self.machines[sight.machine] = self._new[_MACHINES][sight.machine] = row
            return None
        was = (row["cluster"], row["node"])
        self._update(
            _MACHINES,
            sight.machine,
            row,
            {
                "cluster": cluster,
                "node": node,
                "last_seen_at": max(row["last_seen_at"], sight.at),
                "provider_id": sight.provider_id or row["provider_id"],
                "dmi_serial": sight.dmi_serial or row["dmi_serial"],
            },
        )
        return was

    def _row(self, session: Session, uuid: str) -> dict[str, Any] | None:
        row = self.gpus.get(uuid)
        if row is None and uuid in self._inserted:  # named twice in one transaction
            found = session.execute(_gpu_rows([uuid])).one()
            row = self.gpus[uuid] = dict(found._mapping)
        return row

    def gpu(self, session: Session, gpu: GpuIdentity, at: datetime) -> bool:
        """Record the sighting in the GPU's row; True when the GPU had one."""
        row = self._row(session, gpu.uuid)
        if row is None:
            row = {"uuid": gpu.uuid, "first_seen_at": at, "last_seen_at": at}
            row |= {name: getattr(gpu, name) for name in _GPU_FIELDS}
            self.gpus[gpu.uuid] = self._new[_GPUS][gpu.uuid] = row
            return False
        now = {"last_seen_at": max(row["last_seen_at"], at)}
        now |= {name: getattr(gpu, name) or row[name] for name in _GPU_FIELDS}
        self._update(_GPUS, gpu.uuid, row, now)
        return True

    def facts(self, session: Session, gpu: GpuIdentity) -> None:
        """What the report says of a GPU that stays where it sat (a driver upgraded, nvidia-smi
        read at last): each fact it names, written when it differs; one it lacks is kept."""
        row = self._row(session, gpu.uuid)
        if row is not None:
            now = {name: getattr(gpu, name) or row[name] for name in _GPU_FIELDS}
            self._update(_GPUS, gpu.uuid, row, now)

    def _update(self, table: Table, key: str, row: dict[str, Any], now: dict[str, Any]) -> None:
        if any(row[name] != value for name, value in now.items()):
            row.update(now)
            if key not in self._new[table]:
                self._changed[table][key] = row

    def due(self) -> bool:
        return len(self._new[_GPUS]) + len(self.placements) >= _WRITE_BATCH

    def write(self, session: Session) -> None:
        for table, key, fields in ((_MACHINES, "id", _MACHINE_FIELDS), (_GPUS, "uuid", _GPU_SET)):
            if self._new[table]:
                session.execute(insert(table), list(self._new[table].values()))
                if table is _GPUS:  # 8 a node: not held for the rest of the transaction
                    self._inserted.update(self._new[table])
                    for uuid in self._new[table]:
                        del self.gpus[uuid]
                self._new[table] = {}
            if self._changed[table]:
                session.execute(
                    update(table)
                    .where(table.c[key] == bindparam("b_key"))
                    .values({name: bindparam(f"b_{name}") for name in fields}),
                    [
                        {"b_key": row[key]} | {f"b_{name}": row[name] for name in fields}
                        for row in self._changed[table].values()
                    ],
                )
                self._changed[table] = {}
            if table is _MACHINES and self.links:
                session.execute(insert(_LINKS), self.links)
                self.links.clear()
        for rows, table in ((self.placements, _PLACEMENTS), (self.conflicts, _CONFLICTS)):
            if rows:
                session.execute(insert(table), rows)
                rows.clear()


class Ledger:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self.session_factory = session_factory
        self.cluster = cluster
        self.clock: Clock = clock or SystemClock()
        self._nodes: dict[str, _NodePicture] = {}
        self._where: dict[GpuKey, str] = {}  # GPU (`_key`) → the node whose picture holds it
        self._loaded = False
        self._lock = threading.Lock()
        # (node, GPU index) of this cluster's faults and remediations recorded by the index
        # alone, whose GPU no sighting has named yet (`_by_index`); None until first read.
        self._unnamed: set[tuple[str, int]] | None = None

    # --- sightings -------------------------------------------------------------------------

    def _picture(self, session: Session, node: str) -> _NodePicture:
        """The node's picture; the first call loads the whole cluster's in two queries (open
        placements, machines), so a fleet's first cycle is not a query per node."""
        if not self._loaded:
            # Columns, a few thousand at a time, not ORM rows: 10,000 machines and 80,000
            # placements as objects at once were a peak the allocator keeps (a restart).
            machines = (
                select(LedgerMachine.node, LedgerMachine.id)
                .where(LedgerMachine.cluster == self.cluster)
                .order_by(LedgerMachine.last_seen_at)
            )
            for name, machine in session.execute(machines.execution_options(yield_per=_LOAD_ROWS)):
                self._nodes.setdefault(name, _NodePicture()).machine = machine
            placed = (
                select(
                    LedgerPlacement.node,
                    LedgerPlacement.gpu_uuid,
                    LedgerPlacement.pci_bus_id,
                    LedgerPlacement.gpu_index,
                    LedgerPlacement.from_at,
                    *_GPU_COLUMNS,
                )
                .join(LedgerGpu, LedgerGpu.uuid == LedgerPlacement.gpu_uuid)
                .where(LedgerPlacement.cluster == self.cluster, LedgerPlacement.to_at.is_(None))
                .order_by(LedgerPlacement.node)
            )
            # The facts of one node at a time (rows come by node): its fingerprint when it ends.
            reading: tuple[_NodePicture | None, list[GpuIdentity]] = (None, [])
            for name, uuid, address, index, since, serial, model, vbios, driver in session.execute(
                placed.execution_options(yield_per=_LOAD_ROWS)
            ):
                key = _key(uuid)
                picture = self._nodes.setdefault(name, _NodePicture())
                picture.put(key, address, index, since)
                self._where[key] = name
                if reading[0] is not picture:
                    _fingerprint(*reading)
                    reading = (picture, [])
                known = GpuIdentity(uuid, serial=serial, model=model, vbios=vbios, driver=driver)
                reading[1].append(known)
            _fingerprint(*reading)
            self._loaded = True
        return self._nodes.setdefault(node, _NodePicture())

    def observe_machine(
        self,
        node: str,
        machine_id: str | None,
        at: datetime,
        *,
        provider_id: str | None = None,
        dmi_serial: str | None = None,
    ) -> None:
        """The machine now behind a node name. A different machine under the same name (a
        recreated instance, a swapped board) ends every placement on the node: its GPUs are
        other hardware until they report themselves."""
        # The steady state (the intake asks for every node each cycle): one dict lookup.
        if machine_id is not None and _news(self._nodes.get(node), machine_id):
            self.observe_machines({node: MachineSeen(machine_id, at, provider_id, dmi_serial)})

    def observe_machines(self, seen: Mapping[str, MachineSeen]) -> None:
        """`observe_machine` for many nodes in one transaction, none at all when the picture
        already has each. A machine seen under a node name it was not under before gets a
        `placed` link: its page's node names over time."""
        self._observe(seen, {})

    def _seen_on(
        self,
        session: Session,
        picture: _NodePicture,
        node: str,
        sight: MachineSeen,
        writes: _Writes,
    ) -> None:
        was = writes.machine(sight, self.cluster, node)
        if was != (self.cluster, node):
            writes.links.append(
                {
                    "cluster": self.cluster,
                    "subject": PLACED,
                    "ref_id": None,
                    "node": node,
                    "gpu_uuid": None,
                    "machine_id": sight.machine,
                    "kind": "node",
                    "code": None,
                    "detail": {} if was is None else {"was_cluster": was[0], "was_node": was[1]},
                    "at": sight.at,
                }
            )
        if picture.machine is not None:
            writes.write(session)
            self._close_node(session, node, sight.at)
            picture.clear()
        picture.machine = sight.machine

    def observe_hosts(
        self, sightings: Mapping[str, tuple[HostHardware, datetime]]
    ) -> list[Conflict]:
        """What agents reported of their hosts (a heartbeat flush's worth), in one transaction:
        each node's machine by its DMI serial, then its GPUs placed on that machine. Only what
        changed is written: a report the picture already holds writes nothing."""
        return self._observe(
            {
                node: MachineSeen(host.machine, at, dmi_serial=host.dmi_serial)
                for node, (host, at) in sightings.items()
                if host.machine is not None
            },
            {node: (host.gpus, at) for node, (host, at) in sightings.items() if host.gpus},
        )

    def _close_node(self, session: Session, node: str, at: datetime) -> None:
        session.execute(
            update(LedgerPlacement)
            .where(
                LedgerPlacement.cluster == self.cluster,
                LedgerPlacement.node == node,
                LedgerPlacement.to_at.is_(None),
            )
            .values(to_at=at)
        )

    def observe_gpus(self, node: str, gpus: Sequence[GpuIdentity], at: datetime) -> list[Conflict]:
        """GPUs a node reports (the agent's inventory, DCGM's labels). Writes only what changed;
        a different UUID at a PCI address that had one on the same machine is a conflict (a
        swapped card): recorded and the new card placed, never merged into the old one."""
        return self.observe_many({node: (gpus, at)})

    def observe_many(
        self, sightings: Mapping[str, tuple[Sequence[GpuIdentity], datetime]]
    ) -> list[Conflict]:
        """`observe_gpus` for many nodes in one transaction (a cycle's signals)."""
        return self._observe({}, sightings)

    def _observe(
        self,
        machines: Mapping[str, MachineSeen],
        sightings: Mapping[str, tuple[Sequence[GpuIdentity], datetime]],
    ) -> list[Conflict]:
        """Machines behind node names, then the GPUs the nodes report, in one transaction;
        none when the picture holds all of it. A node whose machine changes has its GPUs
        placed again on the new one."""
        conflicts: list[Conflict] = []
        wanted: dict[str, tuple[list[GpuIdentity], datetime]] = {}
        for node, (gpus, at) in sightings.items():
            unique = {
                g.uuid: g
                if pci(g.pci_bus_id) == g.pci_bus_id
                else replace(g, pci_bus_id=pci(g.pci_bus_id))
                for g in gpus
            }
            wanted[node] = (list(unique.values()), at)
        with self._lock:
            moved = {n: s for n, s in machines.items() if _news(self._nodes.get(n), s.machine)}
            changed = {
                node: (gpus, at)
                for node, (gpus, at) in wanted.items()
                if node in moved
                or (picture := self._nodes.get(node)) is None
                or picture.facts != facts_of(gpus)
                or not all(self._unchanged(picture, g) for g in gpus)
            }
            if not moved and not changed:
                return conflicts
            with session_scope(self.session_factory, write=True) as session:
                writes = _Writes()
                if moved:
                    ids = sorted({s.machine for s in moved.values()})
                    writes.machines = {
                        row.id: dict(row._mapping)
                        for chunk in _chunks(ids)
                        for row in session.execute(
                            select(LedgerMachine.id, *_MACHINE_COLUMNS).where(
                                LedgerMachine.id.in_(chunk)
                            )
                        )
                    }
                    for node, sight in moved.items():
                        picture = self._picture(session, node)
                        if _news(picture, sight.machine):
                            self._seen_on(session, picture, node, sight, writes)
                uuids = [g.uuid for gpus, _ in changed.values() for g in gpus]
                writes.gpus = {
                    row.uuid: dict(row._mapping)
                    for chunk in _chunks(uuids)
                    for row in session.execute(_gpu_rows(chunk))
                }
                for node, (gpus, at) in changed.items():
                    picture = self._picture(session, node)
                    for gpu in gpus:
                        if not self._unchanged(picture, gpu):
                            conflicts.extend(self._place(session, picture, node, gpu, at, writes))
                        else:
                            writes.facts(session, gpu)
                    picture.facts = facts_of(gpus)
                writes.write(session)
        return conflicts

    @staticmethod
    def _unchanged(picture: _NodePicture, gpu: GpuIdentity) -> bool:
        at = picture.find(gpu.pci_bus_id, gpu.index)
        return at is not None and picture.uuids[at] == _key(gpu.uuid)

    def _place(
        self,
        session: Session,
        picture: _NodePicture,
        node: str,
        gpu: GpuIdentity,
        at: datetime,
        writes: _Writes,
    ) -> list[Conflict]:
        conflicts: list[Conflict] = []
        seen_before = writes.gpu(session, gpu, at)
        key = _key(gpu.uuid)
        old = picture.by_pci(gpu.pci_bus_id) if gpu.pci_bus_id is not None else None
        if old is not None and picture.uuids[old] != key and gpu.pci_bus_id is not None:
            conflict = Conflict(
                self.cluster,
                node,
                picture.machine,
                gpu.pci_bus_id,
                _name(picture.uuids[old]),
                gpu.uuid,
                at,
            )
            writes.conflicts.append(asdict(conflict))  # its fields are the row's columns
            conflicts.append(conflict)
        # Wherever this GPU sat before (another node, another slot), it sits there no more;
        # nor does whatever sat in this slot. A GPU never seen before sat nowhere.
        held = picture.by_index(gpu.index) if gpu.index is not None else None
        stale = {picture.uuids[k] for k in (old, held) if k is not None}
        if seen_before:
            stale.add(key)
        if stale:
            writes.write(session)  # the placements this closes may be among those pending
            session.execute(
                update(LedgerPlacement)
                .where(
                    LedgerPlacement.to_at.is_(None),
                    LedgerPlacement.gpu_uuid.in_(sorted(_name(k) for k in stale)),
                )
                .values(to_at=at)
            )
        for gone in stale:
            before = self._nodes.get(self._where.pop(gone, ""))
            if before is not None:
                before.drop(gone)
        self._where[key] = node
        writes.placements.append(
            {
                "gpu_uuid": gpu.uuid,
                "machine_id": picture.machine,
                "cluster": self.cluster,
                "node": node,
                "pci_bus_id": gpu.pci_bus_id,
                "gpu_index": gpu.index,
                "from_at": at,
                "to_at": None,
            }
        )
        picture.put(key, gpu.pci_bus_id, gpu.index, at)
        if gpu.index is not None and (node, gpu.index) in self._by_index(session):
            self._name_index(session, picture, node, gpu)
        if writes.due():
            writes.write(session)
        return conflicts

    def _by_index(self, session: Session) -> set[tuple[str, int]]:
        """`_unnamed`, read from the database the first time (a restart keeps what waits)."""
        if self._unnamed is None:
            index = LedgerLink.detail[GPU_INDEX].as_integer()
            rows = session.execute(
                select(LedgerLink.node, index)
                .where(
                    LedgerLink.cluster == self.cluster,
                    LedgerLink.gpu_uuid.is_(None),
                    LedgerLink.subject.in_((SIGNAL, REMEDIATION)),
                    index.is_not(None),
                )
                .distinct()
            )
            self._unnamed = {(str(node), int(at)) for node, at in rows}
        return self._unnamed

    def _name_index(
        self, session: Session, picture: _NodePicture, node: str, gpu: GpuIdentity
    ) -> None:
        """The faults and remediations recorded by this GPU's index on the machine now behind
        the node become the GPU's (a fault before any sighting named it: no agent, no UUID in
        the signal). Those of another machine under the name stay as they are."""
        assert gpu.index is not None and self._unnamed is not None
        machine = picture.machine
        session.execute(
            update(LedgerLink)
            .where(
                LedgerLink.cluster == self.cluster,
                LedgerLink.node == node,
                LedgerLink.gpu_uuid.is_(None),
                LedgerLink.subject.in_((SIGNAL, REMEDIATION)),
                LedgerLink.machine_id.is_(None)
                if machine is None
                else LedgerLink.machine_id == machine,
                LedgerLink.detail[GPU_INDEX].as_integer() == gpu.index,
            )
            .values(gpu_uuid=gpu.uuid)
        )
        self._unnamed.discard((node, gpu.index))

    def _waiting_for_names(self, links: Iterable[tuple[str, int | None]]) -> None:
        """Links just recorded by GPU index: named by the next sighting of the GPU there."""
        with self._lock:
            if self._unnamed is not None:
                self._unnamed.update((node, index) for node, index in links if index is not None)

    # --- linking ---------------------------------------------------------------------------

    def resolve(self, signals: Sequence[Signal]) -> list[Signal]:
        """Each signal with its GPU's UUID: a signal that carries one (with its PCI address or
        index) teaches the ledger where that GPU sits; one without is given the UUID of the GPU
        at its node + PCI address (or index) at its time. Unknown stays unknown."""
        out: list[Signal] = []
        learned: dict[str, list[GpuIdentity]] = {}
        first: dict[str, datetime] = {}
        where = self._where
        for signal in signals:
            uuid = signal.gpu_uuid
            known = uuid is not None and where.get(_key(uuid)) == signal.node
            if known and DMI_LABEL not in signal.labels:
                out.append(signal)  # the steady state: one dict lookup, nothing to learn
                continue
            address = signal_pci(signal)
            serial = dmi_serial(signal.labels.get(DMI_LABEL))
            if serial is not None:
                machine = machine_id("", {}, serial)
                self.observe_machine(signal.node, machine, signal.observed_at, dmi_serial=serial)
            if signal.gpu_uuid is not None:
                if self._known_at(signal.node, signal.gpu_uuid, address, signal.gpu):
                    out.append(signal)  # the steady state: a dict lookup, nothing to learn
                    continue
                if address is not None or signal.gpu is not None:
                    at = first.get(signal.node, signal.observed_at)
                    first[signal.node] = min(at, signal.observed_at)
                    learned.setdefault(signal.node, []).append(
                        GpuIdentity(
                            uuid=signal.gpu_uuid,
                            pci_bus_id=address,
                            index=signal.gpu,
                            model=signal.labels.get(MODEL_LABEL),
                            serial=signal.labels.get("gpu_serial"),
                            vbios=signal.labels.get("vbios"),
                        )
                    )
                out.append(signal)
                continue
            uuid = self.gpu_at(signal.node, address, signal.gpu, signal.observed_at)
            out.append(signal if uuid is None else signal.model_copy(update={"gpu_uuid": uuid}))
        if learned:
            self.observe_many({node: (gpus, first[node]) for node, gpus in learned.items()})
        return out

    def _known_at(self, node: str, uuid: str, address: str | None, index: int | None) -> bool:
        picture = self._nodes.get(node)
        if picture is None:
            return False
        at = picture.find(address, index)
        return at is not None and picture.uuids[at] == _key(uuid)

    def gpu_at(self, node: str, address: str | None, index: int | None, at: datetime) -> str | None:
        if address is None and index is None:
            return None
        picture = self._nodes.get(node)
        if picture is not None:
            found = picture.find(address, index)
            if found is None:
                return None  # the picture holds every open placement of the node
            if picture.when(found) <= at:
                return _name(picture.uuids[found])
            # Older than the GPU now in the slot (a late delivery): whoever sat there then.
        with session_scope(self.session_factory) as session:
            if picture is None:
                with self._lock:
                    self._picture(session, node)
            query = select(LedgerPlacement.gpu_uuid).where(
                LedgerPlacement.cluster == self.cluster,
                LedgerPlacement.node == node,
                LedgerPlacement.from_at <= at,
                or_(LedgerPlacement.to_at.is_(None), LedgerPlacement.to_at > at),
            )
            if address is not None:
                query = query.where(LedgerPlacement.pci_bus_id == address)
            else:
                query = query.where(LedgerPlacement.gpu_index == index)
            return session.scalar(query.order_by(LedgerPlacement.from_at.desc()).limit(1))

    def machine_of(self, node: str) -> str | None:
        picture = self._nodes.get(node)
        return picture.machine if picture is not None else None

    def link_signals(self, signals: Iterable[Signal]) -> None:
        """One link per signal that names a GPU (by UUID, or by index until a sighting names
        it: `_name_index`) or sits on a known machine (the caller passes the signals it stores:
        each fault once per fold window, not every reading)."""
        rows = [
            LedgerLink(
                cluster=self.cluster,
                subject=SIGNAL,
                ref_id=None,
                node=s.node,
                gpu_uuid=s.gpu_uuid,
                machine_id=self.machine_of(s.node),
                kind=s.kind.value,
                code=s.code,
                detail={"source": s.source} | _by_index(s.gpu_uuid, s.gpu),
                at=s.observed_at,
            )
            for s in signals
            if s.gpu_uuid is not None or s.gpu is not None or self.machine_of(s.node) is not None
        ]
        if rows:
            with session_scope(self.session_factory, write=True) as session:
                session.add_all(rows)
            self._waiting_for_names((r.node, r.detail.get(GPU_INDEX)) for r in rows)

    def link_remediation(
        self,
        remediation_id: int,
        node: str,
        signals: Sequence[Signal],
        at: datetime,
        detail: dict[str, Any],
    ) -> None:
        """A remediation tied to each GPU its signals name, by UUID or, until a sighting names
        it, by index (the machine when they name none)."""
        uuids: list[str | None] = [*sorted({s.gpu_uuid for s in signals if s.gpu_uuid is not None})]
        indexes = sorted({s.gpu for s in signals if s.gpu_uuid is None and s.gpu is not None})
        machine = self.machine_of(node)
        if not uuids and not indexes and machine is None:
            return
        first = signals[0] if signals else None
        kind = first.kind.value if first is not None else "unknown"
        code = first.code if first is not None else None
        named = uuids or ([] if indexes else [None])
        self._link(
            REMEDIATION, remediation_id, node, machine, kind, detail, at, named, code, indexes
        )
        self._waiting_for_names((node, index) for index in indexes)

    def link_verdict(
        self,
        node: str,
        gpu_uuid: str | None,
        passed: bool,
        at: datetime,
        detail: dict[str, Any],
        *,
        machine: str | None = None,
    ) -> None:
        """A diagnostic or validation verdict about a GPU (or, without one, the machine);
        `detail` names the `step` and the `remediation_id`."""
        machine = machine or self.machine_of(node)
        kind = "passed" if passed else "failed"
        ref = detail.get("remediation_id")
        self._link(VERDICT, ref, node, machine, kind, detail, at, [gpu_uuid])

    def link_replacement(
        self, remediation_id: int, node: str, machine: str, at: datetime, detail: dict[str, Any]
    ) -> None:
        """The machine behind `node` taken out of its pool by this remediation's replacement."""
        self._link(REPLACEMENT, remediation_id, node, machine, REPLACEMENT, detail, at, [None])

    def _link(
        self,
        subject: str,
        ref_id: int | None,
        node: str,
        machine: str | None,
        kind: str,
        detail: dict[str, Any],
        at: datetime,
        gpu_uuids: Sequence[str | None],
        code: int | None = None,
        indexes: Sequence[int] = (),
    ) -> None:
        """One link per GPU named (one without a GPU for `[None]`) and per GPU known by its
        index alone, in one transaction."""
        named = [(uuid, detail) for uuid in gpu_uuids]
        named += [(None, detail | _by_index(None, index)) for index in indexes]
        with session_scope(self.session_factory, write=True) as session:
            session.add_all(
                LedgerLink(
                    cluster=self.cluster,
                    subject=subject,
                    ref_id=ref_id,
                    node=node,
                    gpu_uuid=uuid,
                    machine_id=machine,
                    kind=kind,
                    code=code,
                    detail=facts,
                    at=at,
                )
                for uuid, facts in named
            )

    # --- questions -------------------------------------------------------------------------

    def remediations_of(
        self,
        since: datetime,
        *,
        gpus: Collection[str] = (),
        machines: Collection[str] = (),
    ) -> list[Link]:
        """Remediation links since `since` that concern any of these GPUs or machines."""
        if not gpus and not machines:
            return []
        with session_scope(self.session_factory) as session:
            rows = session.scalars(
                select(LedgerLink)
                .where(
                    LedgerLink.subject == REMEDIATION,
                    LedgerLink.at > since,
                    or_(
                        LedgerLink.gpu_uuid.in_(list(gpus)),
                        LedgerLink.machine_id.in_(list(machines)),
                    ),
                )
                .order_by(LedgerLink.at)
            )
            return [_link(r) for r in rows]

    def machines_of_remediations(self, ids: Collection[int]) -> dict[int, str]:
        """remediation id → the machine it concerned, for `repeat: {by: machine}`."""
        if not ids:
            return {}
        with session_scope(self.session_factory) as session:
            rows = session.execute(
                select(LedgerLink.ref_id, LedgerLink.machine_id).where(
                    LedgerLink.subject == REMEDIATION,
                    LedgerLink.ref_id.in_(list(ids)),
                    LedgerLink.machine_id.is_not(None),
                )
            )
            return {int(ref): str(machine) for ref, machine in rows if ref is not None}

    def gpus(
        self,
        *,
        model: str | None = None,
        cluster: str | None = None,
        clusters: Collection[str] | None = None,
        min_faults: int = 0,
        limit: int = 500,
    ) -> list[GpuSummary]:
        """GPUs with their fault count (signal links); `cluster` keeps those ever placed there,
        `clusters` (a token's scope) those placed in any of them."""
        faults = (
            select(LedgerLink.gpu_uuid, func.count().label("n"))
            .where(LedgerLink.subject == SIGNAL, LedgerLink.gpu_uuid.is_not(None))
            .group_by(LedgerLink.gpu_uuid)
            .subquery()
        )
        count = func.coalesce(faults.c.n, 0)
        query = select(LedgerGpu, count).outerjoin(faults, faults.c.gpu_uuid == LedgerGpu.uuid)
        if model is not None:
            query = query.where(LedgerGpu.model == model)
        for scope in ([cluster] if cluster is not None else None, clusters):
            if scope is not None:
                placed = select(LedgerPlacement.gpu_uuid).where(
                    LedgerPlacement.cluster.in_(list(scope))
                )
                query = query.where(LedgerGpu.uuid.in_(placed))
        if min_faults > 0:
            query = query.where(count >= min_faults)
        query = query.order_by(count.desc(), LedgerGpu.uuid).limit(limit)
        with session_scope(self.session_factory) as session:
            return [_summary(row, int(n)) for row, n in session.execute(query)]

    def gpu(self, uuid: str, clusters: Collection[str] | None = None) -> GpuLife | None:
        """A GPU's life; with `clusters` (a token's scope) only what happened in them, and None
        for a GPU never placed in any of them."""
        with session_scope(self.session_factory) as session:
            row = session.get(LedgerGpu, uuid)
            if row is None:
                return None
            placed = select(LedgerPlacement).where(LedgerPlacement.gpu_uuid == uuid)
            linked = select(LedgerLink).where(LedgerLink.gpu_uuid == uuid)
            swapped = select(LedgerConflict).where(
                or_(LedgerConflict.known_uuid == uuid, LedgerConflict.seen_uuid == uuid)
            )
            if clusters is not None:
                placed = placed.where(LedgerPlacement.cluster.in_(list(clusters)))
                linked = linked.where(LedgerLink.cluster.in_(list(clusters)))
                swapped = swapped.where(LedgerConflict.cluster.in_(list(clusters)))
            placements = [
                _placement(p) for p in session.scalars(placed.order_by(LedgerPlacement.from_at))
            ]
            if clusters is not None and not placements:
                return None
            links = [
                _link(r) for r in session.scalars(linked.order_by(LedgerLink.at, LedgerLink.id))
            ]
            conflicts = session.scalars(swapped.order_by(LedgerConflict.at))
            return GpuLife(
                _summary(row, sum(1 for link in links if link.subject == SIGNAL)),
                tuple(placements),
                tuple(links),
                tuple(_conflict(c) for c in conflicts),
            )

    def machine(
        self, machine_id: str, clusters: Collection[str] | None = None
    ) -> MachineLife | None:
        with session_scope(self.session_factory) as session:
            row = session.get(LedgerMachine, machine_id)
            if row is None or (clusters is not None and row.cluster not in clusters):
                return None
            placed = select(LedgerPlacement).where(LedgerPlacement.machine_id == machine_id)
            linked = select(LedgerLink).where(LedgerLink.machine_id == machine_id)
            if clusters is not None:
                placed = placed.where(LedgerPlacement.cluster.in_(list(clusters)))
                linked = linked.where(LedgerLink.cluster.in_(list(clusters)))
            placements = session.scalars(placed.order_by(LedgerPlacement.from_at))
            links = session.scalars(linked.order_by(LedgerLink.at, LedgerLink.id))
            return MachineLife(
                row.id,
                row.provider_id,
                row.dmi_serial,
                row.cluster,
                row.node,
                row.first_seen_at,
                row.last_seen_at,
                row.quarantined_at,
                row.quarantine_reason,
                row.quarantined_by,
                row.hold_lifted_at,
                tuple(_placement(p) for p in placements),
                tuple(_link(r) for r in links),
            )

    def strikes(self, machine_id: str, since: datetime) -> list[Strike]:
        """The times since `since` the machine was replaced or failed its validation."""
        with session_scope(self.session_factory) as session:
            rows = session.scalars(
                select(LedgerLink)
                .where(
                    LedgerLink.machine_id == machine_id,
                    LedgerLink.at > since,
                    or_(
                        LedgerLink.subject == REPLACEMENT,
                        (LedgerLink.subject == VERDICT) & (LedgerLink.kind == "failed"),
                    ),
                )
                .order_by(LedgerLink.at)
            )
            out: list[Strike] = []
            for row in rows:
                if row.subject == VERDICT and (row.detail or {}).get("step") != VALIDATE:
                    continue  # a failed diagnosis is the GPU's evidence, not the machine out
                if row.subject == REPLACEMENT:
                    out.append(Strike(REPLACED, row.at, row.node, row.ref_id))
                else:
                    out.append(Strike(VALIDATION_FAILED, row.at, row.node, row.ref_id))
            return out

    def hold_lifted_at(self, machine_id: str) -> datetime | None:
        with session_scope(self.session_factory) as session:
            row = session.get(LedgerMachine, machine_id)
            return row.hold_lifted_at if row is not None else None

    def quarantine(
        self,
        machine_id: str,
        reason: str,
        at: datetime,
        *,
        remediation_id: int | None = None,
        node: str | None = None,
    ) -> bool:
        """Mark the machine never to be returned to a pool; False when it already was."""
        with session_scope(self.session_factory, write=True) as session:
            row = session.get(LedgerMachine, machine_id)
            if row is None or row.quarantined_at is not None:
                return False
            row.quarantined_at, row.quarantine_reason = at, reason
            row.quarantined_by = remediation_id
            session.add(self._hold_link(row, node, "held", at, remediation_id, {"reason": reason}))
            return True

    def lift(self, machine_id: str, at: datetime, *, actor: str, reason: str) -> bool:
        """An operator returns the machine to service; False when it was not quarantined.
        Its strikes so far count no more (`hold_lifted_at`)."""
        with session_scope(self.session_factory, write=True) as session:
            row = session.get(LedgerMachine, machine_id)
            if row is None or row.quarantined_at is None:
                return False
            detail = {"actor": actor, "reason": reason, "was": row.quarantine_reason}
            session.add(self._hold_link(row, None, "lifted", at, row.quarantined_by, detail))
            row.quarantined_at = row.quarantine_reason = row.quarantined_by = None
            row.hold_lifted_at = at
            return True

    def _hold_link(
        self,
        row: LedgerMachine,
        node: str | None,
        kind: str,
        at: datetime,
        remediation_id: int | None,
        detail: dict[str, Any],
    ) -> LedgerLink:
        return LedgerLink(
            cluster=self.cluster,
            subject=HOLD,
            ref_id=remediation_id,
            node=node or row.node,
            gpu_uuid=None,
            machine_id=row.id,
            kind=kind,
            code=None,
            detail=detail,
            at=at,
        )

    def quarantined(self, machine_id: str) -> bool:
        with session_scope(self.session_factory) as session:
            row = session.get(LedgerMachine, machine_id)
            return row is not None and row.quarantined_at is not None

    def quarantine_state(self) -> tuple[dict[str, str], set[tuple[str, str]]]:
        """The quarantined machines (id → reason) and the (machine, node) pairs fenced on
        arrival since each was quarantined (`note_fenced`): what `hold.fences_due` decides on.
        Fleet-wide: a held machine put back in another cluster is still held."""
        with session_scope(self.session_factory) as session:
            held = {
                row.id: row.quarantine_reason or ""
                for row in session.execute(
                    select(LedgerMachine.id, LedgerMachine.quarantine_reason).where(
                        LedgerMachine.quarantined_at.is_not(None)
                    )
                )
            }
            if not held:
                return held, set()
            fenced = session.execute(
                select(LedgerLink.machine_id, LedgerLink.node)
                .join(LedgerMachine, LedgerMachine.id == LedgerLink.machine_id)
                .where(
                    LedgerLink.subject == HOLD,
                    LedgerLink.kind == FENCED,
                    LedgerMachine.quarantined_at.is_not(None),
                    LedgerLink.at >= LedgerMachine.quarantined_at,
                )
            )
            return held, {(str(machine), node) for machine, node in fenced}

    def latest_under(self, held: Collection[str]) -> dict[str, str]:
        """For each node name of this cluster a held machine with a DMI serial was last seen
        under: the machine seen there last (node → machine), by the database, so whichever
        replica took the heartbeat that named it. The arrival check's bare-metal truth, fresher
        than this replica's picture (another machine since under the name is not held)."""
        bare = [m for m in held if rank(m) == DMI_RANK]
        if not bare:
            return {}
        with session_scope(self.session_factory) as session:
            names = (
                select(LedgerMachine.node)
                .where(LedgerMachine.cluster == self.cluster, LedgerMachine.id.in_(bare))
                .scalar_subquery()
            )
            rows = session.execute(
                select(LedgerMachine.id, LedgerMachine.node, LedgerMachine.last_seen_at).where(
                    LedgerMachine.cluster == self.cluster, LedgerMachine.node.in_(names)
                )
            )
            latest: dict[str, tuple[datetime, str]] = {}
            for machine, node, at in rows:
                if node not in latest or latest[node][0] < at:
                    latest[node] = (at, machine)
        return {node: machine for node, (_, machine) in latest.items()}

    def note_fenced(self, machine_id: str, node: str, at: datetime, detail: dict[str, Any]) -> None:
        """A `fenced` line in the machine's quarantine history: its node was fenced on arrival."""
        with session_scope(self.session_factory, write=True) as session:
            row = session.get(LedgerMachine, machine_id)
            if row is not None:
                session.add(self._hold_link(row, node, FENCED, at, row.quarantined_by, detail))

    def hold_on(self, node: str, machine: str | None = None) -> tuple[str, str] | None:
        """(machine, reason) when the machine behind `node` is quarantined: `machine` when the
        caller knows it, else the one the controller saw there last (its picture), else the one
        last seen under the name."""
        machine = machine or self.machine_of(node)
        with session_scope(self.session_factory) as session:
            if machine is not None:
                row = session.get(LedgerMachine, machine)
            else:
                row = session.scalars(
                    select(LedgerMachine)
                    .where(LedgerMachine.cluster == self.cluster, LedgerMachine.node == node)
                    .order_by(LedgerMachine.last_seen_at.desc())
                    .limit(1)
                ).first()
            if row is None or row.quarantined_at is None:
                return None
            return row.id, row.quarantine_reason or ""


def _summary(row: LedgerGpu, faults: int) -> GpuSummary:
    return GpuSummary(
        row.uuid,
        row.serial,
        row.model,
        row.vbios,
        row.driver,
        row.first_seen_at,
        row.last_seen_at,
        faults,
    )
