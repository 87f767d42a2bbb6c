"""The ledger's tables: sightings of machines and GPUs become placements (written only when
something changed, from an in-memory picture of each node), signals, remediations and verdicts
become links to the hardware they concern, and a second UUID at one PCI address is a conflict.

One `Ledger` per controller (per cluster); GPUs and machines are fleet-wide, so a GPU that moves
to another cluster keeps its history. Its queries are the narrow questions policies and pages
ask ("which remediations concerned this GPU since T"), never a table for the caller to join.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.ledger.identity import GpuIdentity, dmi_serial, machine_id, pci
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
# Labels that carry a GPU's PCI address: the agent's kernel-log XID, DCGM exporter's.
PCI_LABELS = ("pci", "pci_bus_id")
MODEL_LABEL = "modelName"  # DCGM exporter's
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
    placements: tuple[Placement, ...]
    links: tuple[Link, ...]


@dataclass
class _Slot:
    uuid: str
    placement_id: int
    from_at: datetime


@dataclass
class _NodePicture:
    machine: str | None = None
    by_pci: dict[str, _Slot] = field(default_factory=dict)
    by_index: dict[int, _Slot] = field(default_factory=dict)


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


def _dmi(machine: str | None) -> bool:
    return machine is not None and machine.startswith("dmi:")


def signal_pci(signal: Signal) -> str | None:
    for label in PCI_LABELS:
        if label in signal.labels:
            return pci(signal.labels[label])
    return None


class Ledger:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self.session_factory = session_factory
        self.cluster = cluster
        self.clock: Clock = clock or SystemClock()
        self._nodes: dict[str, _NodePicture] = {}
        self._lock = threading.Lock()

    # --- sightings -------------------------------------------------------------------------

    def _picture(self, session: Session, node: str) -> _NodePicture:
        picture = self._nodes.get(node)
        if picture is not None:
            return picture
        picture = _NodePicture()
        machine = session.scalar(
            select(LedgerMachine.id)
            .where(LedgerMachine.cluster == self.cluster, LedgerMachine.node == node)
            .order_by(LedgerMachine.last_seen_at.desc())
            .limit(1)
        )
        picture.machine = machine
        rows = session.scalars(
            select(LedgerPlacement).where(
                LedgerPlacement.cluster == self.cluster,
                LedgerPlacement.node == node,
                LedgerPlacement.to_at.is_(None),
            )
        )
        for row in rows:
            slot = _Slot(row.gpu_uuid, row.id, row.from_at)
            if row.pci_bus_id is not None:
                picture.by_pci[row.pci_bus_id] = slot
            if row.gpu_index is not None:
                picture.by_index[row.gpu_index] = slot
        self._nodes[node] = picture
        return picture

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
        if machine_id is None:
            return
        with self._lock:
            known = self._nodes.get(node)
            if known is not None and known.machine == machine_id:
                return
            # The DMI serial the agent read outranks the providerID (see identity.machine_id).
            if known is not None and _dmi(known.machine) and not _dmi(machine_id):
                return
            with session_scope(self.session_factory, write=True) as session:
                picture = self._picture(session, node)
                if picture.machine == machine_id or (
                    _dmi(picture.machine) and not _dmi(machine_id)
                ):
                    return
                row = session.get(LedgerMachine, machine_id)
                if row is None:
                    session.add(
                        LedgerMachine(
                            id=machine_id,
                            provider_id=provider_id,
                            dmi_serial=dmi_serial,
                            cluster=self.cluster,
                            node=node,
                            first_seen_at=at,
                            last_seen_at=at,
                        )
                    )
                else:
                    row.cluster, row.node, row.last_seen_at = self.cluster, node, at
                    row.provider_id = provider_id or row.provider_id
                    row.dmi_serial = dmi_serial or row.dmi_serial
                if picture.machine is not None:
                    self._close_node(session, node, at)
                    picture.by_pci.clear()
                    picture.by_index.clear()
                picture.machine = machine_id

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
        conflicts: list[Conflict] = []
        gpus = [replace(g, pci_bus_id=pci(g.pci_bus_id)) for g in gpus]
        with self._lock:
            picture = self._nodes.get(node)
            if picture is not None and all(self._unchanged(picture, g) for g in gpus):
                return conflicts
            with session_scope(self.session_factory, write=True) as session:
                picture = self._picture(session, node)
                for gpu in gpus:
                    if self._unchanged(picture, gpu):
                        continue
                    conflicts.extend(self._place(session, picture, node, gpu, at))
        return conflicts

    @staticmethod
    def _unchanged(picture: _NodePicture, gpu: GpuIdentity) -> bool:
        slot = (
            picture.by_pci.get(gpu.pci_bus_id)
            if gpu.pci_bus_id is not None
            else picture.by_index.get(gpu.index)
            if gpu.index is not None
            else None
        )
        return slot is not None and slot.uuid == gpu.uuid

    def _place(
        self, session: Session, picture: _NodePicture, node: str, gpu: GpuIdentity, at: datetime
    ) -> list[Conflict]:
        conflicts: list[Conflict] = []
        row = session.get(LedgerGpu, gpu.uuid)
        if row is None:
            session.add(
                LedgerGpu(
                    uuid=gpu.uuid,
                    serial=gpu.serial,
                    model=gpu.model,
                    vbios=gpu.vbios,
                    driver=gpu.driver,
                    first_seen_at=at,
                    last_seen_at=at,
                )
            )
            session.flush()
        else:
            row.last_seen_at = max(row.last_seen_at, at)
            row.serial = gpu.serial or row.serial
            row.model = gpu.model or row.model
            row.vbios = gpu.vbios or row.vbios
            row.driver = gpu.driver or row.driver
        old = picture.by_pci.get(gpu.pci_bus_id) if gpu.pci_bus_id is not None else None
        if old is not None and old.uuid != gpu.uuid and gpu.pci_bus_id is not None:
            conflict = LedgerConflict(
                cluster=self.cluster,
                node=node,
                machine_id=picture.machine,
                pci_bus_id=gpu.pci_bus_id,
                known_uuid=old.uuid,
                seen_uuid=gpu.uuid,
                at=at,
            )
            session.add(conflict)
            conflicts.append(_conflict(conflict))
        # Wherever this GPU sat before (another node, another slot), it sits there no more;
        # nor does whatever sat in this slot.
        stale = [s.placement_id for s in (old, picture.by_index.get(gpu.index or -1)) if s]
        session.execute(
            update(LedgerPlacement)
            .where(
                LedgerPlacement.to_at.is_(None),
                or_(LedgerPlacement.gpu_uuid == gpu.uuid, LedgerPlacement.id.in_(stale)),
            )
            .values(to_at=at)
        )
        for other in self._nodes.values():
            other.by_pci = {k: s for k, s in other.by_pci.items() if s.uuid != gpu.uuid}
            other.by_index = {k: s for k, s in other.by_index.items() if s.uuid != gpu.uuid}
        placement = LedgerPlacement(
            gpu_uuid=gpu.uuid,
            machine_id=picture.machine,
            cluster=self.cluster,
            node=node,
            pci_bus_id=gpu.pci_bus_id,
            gpu_index=gpu.index,
            from_at=at,
        )
        session.add(placement)
        session.flush()
        slot = _Slot(gpu.uuid, placement.id, at)
        if gpu.pci_bus_id is not None:
            picture.by_pci[gpu.pci_bus_id] = slot
        if gpu.index is not None:
            picture.by_index[gpu.index] = slot
        return conflicts

    # --- linking ---------------------------------------------------------------------------

    def resolve(self, signals: Sequence[Signal]) -> list[Signal]:
        """Each signal with its GPU's UUID: a signal that carries one (with its PCI address or
        index) teaches the ledger where that GPU sits; one without is given the UUID of the GPU
        at its node + PCI address (or index) at its time. Unknown stays unknown."""
        out: list[Signal] = []
        learned: dict[str, list[GpuIdentity]] = {}
        first: dict[str, datetime] = {}
        for signal in signals:
            address = signal_pci(signal)
            serial = dmi_serial(signal.labels.get(DMI_LABEL))
            if serial is not None:
                machine = machine_id("", {}, serial)
                self.observe_machine(signal.node, machine, signal.observed_at, dmi_serial=serial)
            if signal.gpu_uuid is not None:
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
        for node, gpus in learned.items():
            picture = self._nodes.get(node)
            if picture is None or not all(self._unchanged(picture, g) for g in gpus):
                self.observe_gpus(node, gpus, first[node])
        return out

    def gpu_at(self, node: str, address: str | None, index: int | None, at: datetime) -> str | None:
        if address is None and index is None:
            return None
        picture = self._nodes.get(node)
        if picture is not None:
            slot = picture.by_pci.get(address) if address is not None else None
            if slot is None and index is not None and address is None:
                slot = picture.by_index.get(index)
            if slot is None:
                return None  # the picture holds every open placement of the node
            if slot.from_at <= at:
                return slot.uuid
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
        """One link per signal that names a GPU or sits on a known machine (the caller passes
        the signals it stores: each fault once per fold window, not every reading)."""
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
                detail={"source": s.source},
                at=s.observed_at,
            )
            for s in signals
            if s.gpu_uuid is not None or self.machine_of(s.node) is not None
        ]
        if rows:
            with session_scope(self.session_factory, write=True) as session:
                session.add_all(rows)

    def link_remediation(
        self,
        remediation_id: int,
        node: str,
        signals: Sequence[Signal],
        at: datetime,
        detail: dict[str, Any],
    ) -> None:
        """A remediation tied to each GPU its signals name (the machine when they name none)."""
        uuids: list[str | None] = [*sorted({s.gpu_uuid for s in signals if s.gpu_uuid is not None})]
        machine = self.machine_of(node)
        if not uuids and machine is None:
            return
        first = signals[0] if signals else None
        kind = first.kind.value if first is not None else "unknown"
        code = first.code if first is not None else None
        with session_scope(self.session_factory, write=True) as session:
            session.add_all(
                LedgerLink(
                    cluster=self.cluster,
                    subject=REMEDIATION,
                    ref_id=remediation_id,
                    node=node,
                    gpu_uuid=uuid,
                    machine_id=machine,
                    kind=kind,
                    code=code,
                    detail=detail,
                    at=at,
                )
                for uuid in (uuids or [None])
            )

    def link_verdict(
        self, node: str, gpu_uuid: str | None, passed: bool, at: datetime, detail: dict[str, Any]
    ) -> None:
        """A diagnostic or validation verdict about a GPU (or, without one, the machine)."""
        with session_scope(self.session_factory, write=True) as session:
            session.add(
                LedgerLink(
                    cluster=self.cluster,
                    subject=VERDICT,
                    ref_id=detail.get("remediation_id"),
                    node=node,
                    gpu_uuid=gpu_uuid,
                    machine_id=self.machine_of(node),
                    kind="passed" if passed else "failed",
                    code=None,
                    detail=detail,
                    at=at,
                )
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
            links = [_link(r) for r in session.scalars(linked.order_by(LedgerLink.at))]
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
            links = session.scalars(linked.order_by(LedgerLink.at))
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
                tuple(_placement(p) for p in placements),
                tuple(_link(r) for r in links),
            )

    def quarantine(self, machine_id: str, reason: str, at: datetime) -> bool:
        """Mark the machine never to be returned to a pool; False when it already was."""
        with session_scope(self.session_factory, write=True) as session:
            row = session.get(LedgerMachine, machine_id)
            if row is None or row.quarantined_at is not None:
                return False
            row.quarantined_at, row.quarantine_reason = at, reason
            return True

    def quarantined(self, machine_id: str) -> bool:
        with session_scope(self.session_factory) as session:
            row = session.get(LedgerMachine, machine_id)
            return row is not None and row.quarantined_at is not None


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
