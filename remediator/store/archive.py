"""The signal archive: every signal the intake receives, kept compact enough for a month of a
large fleet, so a policy change can be replayed against what really came in (remediator.backtest).

A reading that repeats unchanged at consecutive cycles of its source (a GPU at 74 °C poll after
poll, an XID gauge holding its code) is one *run* row: its first and last cycle. Any change of
value — so every crossing of any threshold, present or proposed — starts a new run, and the
cycle times of each source are kept apart, so a replay rebuilds every reading at the time it
came. Below a kind's *floor* (settings: thermal 70 °C) the level counts as unchanged and the
run keeps its highest reading: no policy looks that low, and idle GPUs wander a degree or two
every few minutes. A backtest of a threshold (or clear level) under the floor is not exact.

Runs are written when they end, in one bulk insert per cycle; a run is also cut after `max_run`,
which bounds what a crash can lose and how stale the archive can be.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from remediator.errors import TransientError
from remediator.signals.model import Signal, SignalKind
from remediator.store.db import session_scope
from remediator.store.models import ArchivedCycle, ArchivedLabelSet, ArchivedNode, ArchivedSignal


class ArchiveUnavailable(TransientError):
    """The archive's database refused a cycle; the intake goes on without it."""


RunKey = tuple[str, int | None, str, int | None, str, str]  # node, gpu, kind, code, source, labels
BATCH = 5_000


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    pool: str
    labels: Mapping[str, str]
    ready: bool
    cordoned: bool


@dataclass(frozen=True, slots=True)
class ArchivedRun:
    """One run as read back: the same reading at every cycle of `source` in [first_at, last_at]."""

    node: str
    gpu: int | None
    kind: SignalKind
    code: int | None
    value: float | None
    source: str
    labels: Mapping[str, str]
    gpu_uuid: str | None
    first_at: datetime
    last_at: datetime | None
    readings: int
    lag_ms: int

    @property
    def key(self) -> tuple[str, int | None, str, int | None, str]:
        return (self.node, self.gpu, self.kind.value, self.code, self.source)


@dataclass(frozen=True, slots=True)
class NodeChange:
    at: datetime
    node: str
    present: bool
    pool: str
    labels: Mapping[str, str]
    ready: bool
    cordoned: bool


@dataclass(frozen=True, slots=True)
class Levels:
    """For one reading kind: values at or beyond `breach_*` can start a streak; a run that
    follows one stays of interest while beyond `keep_*` (a streak may still run there)."""

    breach_above: float | None = None
    keep_above: float | None = None
    breach_below: float | None = None
    keep_below: float | None = None

    def breaches(self, value: float | None) -> bool:
        if value is None:
            return False
        above = self.breach_above is not None and value >= self.breach_above
        return above or (self.breach_below is not None and value <= self.breach_below)

    def keeps(self, value: float | None) -> bool:
        if value is None:
            return False
        above = self.keep_above is not None and value >= self.keep_above
        return above or (self.keep_below is not None and value <= self.keep_below)


@dataclass(frozen=True)
class RunFilter:
    """Which runs a replay needs: every run of `every_kind`; of a `levels` kind only the runs
    that breach, each followed by the runs after it while they keep a streak possible, and the
    first one that does not (its first reading ends the streak). Other kinds are left out: no
    policy of the replay looks at them."""

    every_kind: frozenset[str] = frozenset()
    levels: Mapping[str, Levels] = field(default_factory=dict)


@dataclass(slots=True)
class _Run:
    node: str
    gpu: int | None
    kind: str
    code: int | None
    value: float | None
    source: str
    label_set: int | None
    first: datetime
    last: datetime
    readings: int
    lag_ms: int
    below_floor: bool = False

    def row(self, cluster: str) -> dict[str, object]:
        return {
            "cluster": cluster,
            "node": self.node,
            "gpu": self.gpu,
            "kind": self.kind,
            "code": self.code,
            "value": self.value,
            "source": self.source,
            "label_set": self.label_set,
            "first_at": self.first,
            "last_at": self.last if self.readings > 1 else None,
            "readings": self.readings,
            "lag_ms": self.lag_ms,
        }


def label_digest(labels: Mapping[str, str], gpu_uuid: str | None) -> str:
    text = json.dumps([gpu_uuid, sorted(labels.items())], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class SignalArchive:
    """The writer, one per leader. Thread-safe: poll and push cycles may overlap."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        cluster: str,
        *,
        max_run: timedelta = timedelta(hours=1),
        floors: Mapping[str, float] | None = None,
        floor_max_run: timedelta = timedelta(hours=24),
    ) -> None:
        self._factory = session_factory
        self.cluster = cluster
        self.max_run = max_run
        self.floors = dict(floors or {})
        # Readings under the floor change no decision, so losing some at a crash costs nothing.
        self.floor_max_run = floor_max_run
        self._open: dict[RunKey, _Run] = {}
        self._label_ids: dict[str, int] = {}
        self._digests: dict[
            tuple[str, int | None, str, int | None, str], tuple[Mapping[str, str], str | None, str]
        ] = {}
        self._last_cycle: dict[str, datetime] = {}
        self._nodes: dict[str, NodeSnapshot] = {}
        # Ended runs and node changes not yet written (the database refused the last cycle).
        self._pending: list[_Run] = []
        self._pending_nodes: list[dict[str, object]] = []
        self._lock = threading.Lock()

    def record(
        self,
        signals: Sequence[Signal],
        nodes: Mapping[str, NodeSnapshot] | None,
        now: datetime,
    ) -> None:
        """Archive one intake cycle: extend or start runs, write the runs that ended, the cycle
        and the node changes, in one transaction. When the database refuses, what ended is kept
        for the next cycle and ArchiveUnavailable says why (this cycle's readings are lost)."""
        with self._lock:
            self._pending_nodes += self._node_changes(nodes, now) if nodes is not None else []
            if not signals and not self._pending_nodes and not self._pending:
                return
            try:
                digests = [self._digest(signal) for signal in signals]
                # Label sets in a transaction of their own: an id once learned is committed.
                with session_scope(self._factory, write=True) as session:
                    self._register_labels(session, signals, digests)
                with session_scope(self._factory, write=True) as session:
                    self._write(session, signals, digests, now)
            except SQLAlchemyError as exc:
                raise ArchiveUnavailable(f"signal archive not written: {exc}") from exc
            self._pending, self._pending_nodes = [], []

    def _write(
        self, session: Session, signals: Sequence[Signal], digests: Sequence[str], now: datetime
    ) -> None:
        self._pending += self._advance(signals, digests, now)
        sources = sorted({s.source for s in signals})
        if sources:
            session.execute(
                _insert_for(session)(ArchivedCycle).on_conflict_do_nothing(),
                [{"cluster": self.cluster, "source": s, "at": now} for s in sources],
            )
        for start in range(0, len(self._pending), BATCH):
            rows = [run.row(self.cluster) for run in self._pending[start : start + BATCH]]
            session.execute(insert(ArchivedSignal), rows)
        if self._pending_nodes:
            session.execute(insert(ArchivedNode), self._pending_nodes)

    def flush(self) -> int:
        """Write every open run (at shutdown, or before an export of the latest data)."""
        with self._lock, session_scope(self._factory, write=True) as session:
            runs = [*self._pending, *self._open.values()]
            self._open.clear()
            self._pending = []
            for start in range(0, len(runs), BATCH):
                rows = [run.row(self.cluster) for run in runs[start : start + BATCH]]
                session.execute(insert(ArchivedSignal), rows)
            return len(runs)

    def prune(self, before: datetime) -> int:
        """Retention: drop what ended before `before`, keeping each node's newest inventory row
        (a replay starts from it)."""
        with self._lock, session_scope(self._factory, write=True) as session:
            ended = func.coalesce(ArchivedSignal.last_at, ArchivedSignal.first_at)
            deleted: Any = session.execute(
                delete(ArchivedSignal).where(ArchivedSignal.cluster == self.cluster, ended < before)
            )
            session.execute(
                delete(ArchivedCycle).where(
                    ArchivedCycle.cluster == self.cluster, ArchivedCycle.at < before
                )
            )
            newest = (
                select(func.max(ArchivedNode.id))
                .where(ArchivedNode.cluster == self.cluster)
                .group_by(ArchivedNode.node)
            )
            session.execute(
                delete(ArchivedNode).where(
                    ArchivedNode.cluster == self.cluster,
                    ArchivedNode.at < before,
                    ArchivedNode.id.not_in(newest),
                )
            )
            used = select(ArchivedSignal.label_set).where(
                ArchivedSignal.cluster == self.cluster, ArchivedSignal.label_set.is_not(None)
            )
            open_ids = {run.label_set for run in self._open.values() if run.label_set is not None}
            session.execute(
                delete(ArchivedLabelSet).where(
                    ArchivedLabelSet.cluster == self.cluster,
                    ArchivedLabelSet.id.not_in(used),
                    ArchivedLabelSet.id.not_in(open_ids or {-1}),
                )
            )
            self._label_ids = {d: i for d, i in self._label_ids.items() if i in open_ids}
            return int(deleted.rowcount or 0)

    def _advance(
        self, signals: Sequence[Signal], digests: Sequence[str], now: datetime
    ) -> list[_Run]:
        closed: list[_Run] = []
        sources = {s.source for s in signals}
        previous = {s: self._last_cycle.get(s) for s in sources}
        seen: set[RunKey] = set()
        for signal, digest in zip(signals, digests, strict=True):
            kind = signal.kind.value
            key: RunKey = (signal.node, signal.gpu, kind, signal.code, signal.source, digest)
            run = self._open.get(key)
            value = signal.value
            floor = self.floors.get(kind)
            below = floor is not None and value is not None and value < floor
            if (
                run is not None
                and key not in seen
                and (run.value == value or (below and run.below_floor))
                and run.last == previous[signal.source]
                and now - run.first < (self.floor_max_run if run.below_floor else self.max_run)
            ):
                run.last = now
                run.readings += 1
                if below and run.value is not None and value is not None:
                    run.value = max(run.value, value)
                seen.add(key)
                continue
            if run is not None:
                closed.append(run)
            lag = int((now - signal.observed_at).total_seconds() * 1000)
            label_set = self._label_ids[digest] if digest else None
            self._open[key] = _Run(
                signal.node,
                signal.gpu,
                kind,
                signal.code,
                value,
                signal.source,
                label_set,
                now,
                now,
                1,
                lag,
                below,
            )
            seen.add(key)
        for key, run in list(self._open.items()):
            if run.source in sources and key not in seen:
                closed.append(self._open.pop(key))
        for source in sources:
            self._last_cycle[source] = now
        return closed

    def _digest(self, signal: Signal) -> str:
        """The label set's digest; a series repeats its labels, so the last one is reused."""
        if not signal.labels and not signal.gpu_uuid:
            return ""
        series = (signal.node, signal.gpu, signal.kind.value, signal.code, signal.source)
        cached = self._digests.get(series)
        if cached is not None and cached[0] == signal.labels and cached[1] == signal.gpu_uuid:
            return cached[2]
        digest = label_digest(signal.labels, signal.gpu_uuid)
        self._digests[series] = (signal.labels, signal.gpu_uuid, digest)
        return digest

    def _register_labels(
        self, session: Session, signals: Sequence[Signal], digests: Sequence[str]
    ) -> None:
        """Store the label sets not seen before, in one statement, and learn their ids."""
        new = {
            d: s for s, d in zip(signals, digests, strict=True) if d and d not in self._label_ids
        }
        if not new:
            return
        rows = [
            {"cluster": self.cluster, "digest": d, "gpu_uuid": s.gpu_uuid, "labels": s.labels}
            for d, s in new.items()
        ]
        for start in range(0, len(rows), BATCH):
            session.execute(
                _insert_for(session)(ArchivedLabelSet).on_conflict_do_nothing(
                    index_elements=["cluster", "digest"]
                ),
                rows[start : start + BATCH],
            )
        wanted = list(new)
        for start in range(0, len(wanted), 500):
            found = session.execute(
                select(ArchivedLabelSet.digest, ArchivedLabelSet.id).where(
                    ArchivedLabelSet.cluster == self.cluster,
                    ArchivedLabelSet.digest.in_(wanted[start : start + 500]),
                )
            )
            for digest, ident in found:
                self._label_ids[digest] = ident

    def _node_changes(
        self, nodes: Mapping[str, NodeSnapshot], now: datetime
    ) -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        for name, snap in nodes.items():
            if self._nodes.get(name) != snap:
                rows.append(_node_row(self.cluster, name, now, True, snap))
        for name in set(self._nodes) - set(nodes):
            rows.append(_node_row(self.cluster, name, now, False, self._nodes[name]))
        self._nodes = dict(nodes)
        return rows


def _node_row(
    cluster: str, node: str, at: datetime, present: bool, snap: NodeSnapshot
) -> dict[str, object]:
    return {
        "cluster": cluster,
        "node": node,
        "at": at,
        "present": present,
        "pool": snap.pool,
        "labels": dict(snap.labels),
        "ready": snap.ready,
        "cordoned": snap.cordoned,
    }


def _insert_for(session: Session) -> Any:
    """The dialect's INSERT, which (unlike the generic one) knows ON CONFLICT."""
    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


# -- reading back --------------------------------------------------------------------------------


def read_cycles(
    factory: sessionmaker[Session], cluster: str, since: datetime, until: datetime
) -> dict[str, list[datetime]]:
    cycles: dict[str, list[datetime]] = {}
    with session_scope(factory) as session:
        rows = session.execute(
            select(ArchivedCycle.source, ArchivedCycle.at)
            .where(
                ArchivedCycle.cluster == cluster,
                ArchivedCycle.at >= since,
                ArchivedCycle.at < until,
            )
            .order_by(ArchivedCycle.source, ArchivedCycle.at)
        )
        for source, at in rows:
            cycles.setdefault(source, []).append(at)
    return cycles


_RUN_COLUMNS = (
    ArchivedSignal.id,
    ArchivedSignal.node,
    ArchivedSignal.gpu,
    ArchivedSignal.kind,
    ArchivedSignal.code,
    ArchivedSignal.value,
    ArchivedSignal.source,
    ArchivedSignal.label_set,
    ArchivedSignal.first_at,
    ArchivedSignal.last_at,
    ArchivedSignal.readings,
    ArchivedSignal.lag_ms,
)


def read_runs(
    factory: sessionmaker[Session],
    cluster: str,
    since: datetime,
    until: datetime,
    wanted: RunFilter | None = None,
) -> list[ArchivedRun]:
    """The runs overlapping [since, until), all of them or only those `wanted` needs.

    A filtered read asks one indexed question per kind (kind and value range; the window is
    checked on the few rows that come back, so the planner cannot prefer a scan of the whole
    window), then reads forward from each breach along its series."""
    ended = func.coalesce(ArchivedSignal.last_at, ArchivedSignal.first_at)
    with session_scope(factory) as session:
        labels = _label_sets(session, cluster)
        if wanted is None:
            window = and_(
                ArchivedSignal.cluster == cluster,
                ArchivedSignal.first_at < until,
                ended >= since,
            )
            rows = list(session.execute(select(*_RUN_COLUMNS).where(window)))
            return sorted((_run(r, labels) for r in rows), key=_run_order)
        found: dict[int, Any] = {}
        questions: list[ColumnElement[bool]] = [
            ArchivedSignal.kind == kind for kind in sorted(wanted.every_kind)
        ]
        for kind, level in sorted(wanted.levels.items()):
            if level.breach_above is not None:
                questions.append(
                    and_(ArchivedSignal.kind == kind, ArchivedSignal.value >= level.breach_above)
                )
            if level.breach_below is not None:
                questions.append(
                    and_(ArchivedSignal.kind == kind, ArchivedSignal.value <= level.breach_below)
                )
        for question in questions:
            query = select(*_RUN_COLUMNS).where(
                ArchivedSignal.cluster == cluster, question, ended >= since
            )
            for row in session.execute(query):
                if row.first_at < until:
                    found[row.id] = row
        breaches: dict[tuple[Any, ...], datetime] = {}
        for row in found.values():
            if row.kind in wanted.levels:
                key = (row.node, row.gpu, row.kind, row.code, row.source)
                breaches[key] = min(breaches.get(key, row.first_at), row.first_at)
        for key, start in breaches.items():
            _follow(session, cluster, key, start, until, wanted.levels[key[2]], found)
        return sorted((_run(r, labels) for r in found.values()), key=_run_order)


def iter_runs(
    factory: sessionmaker[Session], cluster: str, since: datetime, until: datetime
) -> Iterator[ArchivedRun]:
    """Every run overlapping [since, until) in time order, streamed (for the export)."""
    ended = func.coalesce(ArchivedSignal.last_at, ArchivedSignal.first_at)
    with session_scope(factory) as session:
        labels = _label_sets(session, cluster)
        rows = session.execute(
            select(*_RUN_COLUMNS)
            .where(
                ArchivedSignal.cluster == cluster,
                ArchivedSignal.first_at < until,
                ended >= since,
            )
            .order_by(ArchivedSignal.first_at, ArchivedSignal.id),
            execution_options={"yield_per": BATCH},
        )
        for row in rows:
            yield _run(row, labels)


def _follow(
    session: Session,
    cluster: str,
    key: tuple[Any, ...],
    start: datetime,
    until: datetime,
    level: Levels,
    found: dict[int, Any],
) -> None:
    """Add the runs after each breach of one series that may carry its streak, and the first
    one that ends it."""
    node, gpu, kind, code, source = key
    rows = session.execute(
        select(*_RUN_COLUMNS)
        .where(
            ArchivedSignal.cluster == cluster,
            ArchivedSignal.node == node,
            ArchivedSignal.gpu.is_(None) if gpu is None else ArchivedSignal.gpu == gpu,
            ArchivedSignal.kind == kind,
            ArchivedSignal.first_at >= start,
            ArchivedSignal.first_at < until,
            ArchivedSignal.code.is_(None) if code is None else ArchivedSignal.code == code,
            ArchivedSignal.source == source,
        )
        .order_by(ArchivedSignal.first_at)
    )
    carrying = False
    for row in rows:
        if level.breaches(row.value):
            carrying = True
            found[row.id] = row
        elif carrying:
            found[row.id] = row
            carrying = level.keeps(row.value)


def _label_sets(session: Session, cluster: str) -> dict[int, tuple[str | None, dict[str, str]]]:
    rows = session.execute(
        select(ArchivedLabelSet.id, ArchivedLabelSet.gpu_uuid, ArchivedLabelSet.labels).where(
            ArchivedLabelSet.cluster == cluster
        )
    )
    return {i: (uuid, dict(labels)) for i, uuid, labels in rows}


def _run(row: Any, labels: Mapping[int, tuple[str | None, dict[str, str]]]) -> ArchivedRun:
    uuid, values = (
        labels.get(row.label_set, (None, {})) if row.label_set is not None else (None, {})
    )
    return ArchivedRun(
        node=row.node,
        gpu=row.gpu,
        kind=SignalKind(row.kind),
        code=row.code,
        value=row.value,
        source=row.source,
        labels=values,
        gpu_uuid=uuid,
        first_at=row.first_at,
        last_at=row.last_at,
        readings=row.readings,
        lag_ms=row.lag_ms,
    )


def _run_order(run: ArchivedRun) -> tuple[datetime, str, int, str]:
    return (run.first_at, run.node, -1 if run.gpu is None else run.gpu, run.kind.value)


def read_nodes(
    factory: sessionmaker[Session], cluster: str, since: datetime, until: datetime
) -> list[NodeChange]:
    """Each node's last change at or before `since`, then every change up to `until`."""
    with session_scope(factory) as session:
        start = (
            select(ArchivedNode.node, func.max(ArchivedNode.id).label("id"))
            .where(ArchivedNode.cluster == cluster, ArchivedNode.at <= since)
            .group_by(ArchivedNode.node)
            .subquery()
        )
        first = session.scalars(select(ArchivedNode).where(ArchivedNode.id.in_(select(start.c.id))))
        later = session.scalars(
            select(ArchivedNode)
            .where(
                ArchivedNode.cluster == cluster,
                ArchivedNode.at > since,
                ArchivedNode.at < until,
            )
            .order_by(ArchivedNode.at, ArchivedNode.id)
        )
        return [_change(r) for r in (*first, *later)]


def _change(row: ArchivedNode) -> NodeChange:
    return NodeChange(
        row.at, row.node, row.present, row.pool, dict(row.labels), row.ready, row.cordoned
    )
