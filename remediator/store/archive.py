"""The signal archive: every signal the intake receives, kept compact enough for a month of a
large fleet, so a policy change can be replayed against what really came in (remediator.backtest).

A reading that repeats unchanged at consecutive cycles of its source (a GPU at 74 °C poll after
poll, an XID gauge holding its code) is one *run* row: its first and last cycle. Any change of
value — so every crossing of any threshold, present or proposed — starts a new run, and the
cycle times of each source are kept apart, so a replay rebuilds every reading at the time it
came. Below a kind's *floor* (settings: thermal 70 °C) the level counts as unchanged and the
run keeps its highest reading: no policy looks that low, and idle GPUs wander a degree or two
every few minutes. A backtest of a threshold (or clear level) under the floor is not exact.

A run's row is written when it starts (open) and completed when it ends, in the transaction of
its cycle, so a backtest right after an incident sees the faults still going; each reading's own
observed time is kept (a constant lag behind its cycle, or a constant step between samples), so a
replay completes a `for:` on the same reading the controller did. A run is also cut after
`max_run`; runs a dead writer left open are closed by the next one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    null,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from remediator.errors import TransientError
from remediator.signals.model import Signal, SignalKind
from remediator.store.db import session_scope
from remediator.store.models import (
    ArchivedCycle,
    ArchivedLabelSet,
    ArchivedNode,
    ArchivedSignal,
    UTCDateTime,
)


class ArchiveUnavailable(TransientError):
    """The archive's database refused a cycle; the intake goes on without it."""


RunKey = tuple[str, int | None, str, int | None, str, str]  # node, gpu, kind, code, source, labels
# An enum member's `.value` is a descriptor call; the archive asks it of every reading.
_KIND_VALUES = {kind: kind.value for kind in SignalKind}
_NEVER = datetime.max.replace(tzinfo=UTC)
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
    observed_at: datetime | None = None  # the first reading's own time (None: an older row)
    step_us: int | None = None

    @property
    def key(self) -> tuple[str, int | None, str, int | None, str]:
        return (self.node, self.gpu, self.kind.value, self.code, self.source)

    def observed(self, at: datetime, index: int) -> datetime:
        """The observed time of the reading at cycle `at`, the run's `index`-th."""
        return self.observed_times([at], index)[0]

    def observed_times(self, cycles: Sequence[datetime], first: int = 0) -> list[datetime]:
        """The observed times of the readings at `cycles`, the first of them the run's
        `first`-th (one pass: a replay asks this for every reading it rebuilds)."""
        if self.observed_at is None or self.step_us is None:
            lag = (
                timedelta(milliseconds=self.lag_ms)
                if self.observed_at is None
                else self.first_at - self.observed_at
            )
            return [at - lag for at in cycles]
        step = timedelta(microseconds=self.step_us)
        return [self.observed_at + step * (first + i) for i in range(len(cycles))]


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
    observed: datetime
    below_floor: bool = False
    step: timedelta | None = None  # None: every reading lies as far before its cycle
    id: int | None = None  # its row, once written
    ended: bool = False
    # Worked out once at the start, not at every reading: the cycle from which it is cut
    # (max_run), and how far each reading lies before its cycle.
    cut_at: datetime = _NEVER
    lag: timedelta = timedelta(0)
    value_changed: bool = False  # below the floor, a higher reading than its row holds

    @property
    def identity(self) -> tuple[object, ...]:
        """What tells its row from any other written in the same statement (_RUN_KEY's order)."""
        return (
            self.node,
            self.gpu,
            self.kind,
            self.code,
            self.source,
            self.label_set,
            self.first,
        )

    def fits(self, observed: datetime, now: datetime) -> bool:
        """The next reading's time follows the run's pattern (any does, after the first)."""
        if self.readings == 1:
            return True
        if self.step is None:
            return observed == now - self.lag
        return observed == self.observed + self.step * self.readings

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
            "lag_ms": int((self.first - self.observed).total_seconds() * 1000),
            "observed_at": self.observed,
            "step_us": _micros(self.step),
            "open": not self.ended,
        }

    def ending(self) -> dict[str, object]:
        """What closes its written row: only what the row does not hold yet (an open row's
        end and count are read from the cycles; its value moves only under the floor)."""
        row: dict[str, object] = {
            "row_id": self.id,
            "last_at": self.last if self.readings > 1 else None,
            "readings": self.readings,
        }
        if self.value_changed:
            row["value"] = self.value
        return row


def _unique_batches(runs: Sequence[_Run]) -> list[dict[tuple[object, ...], _Run]]:
    """Batches of at most BATCH runs, no two alike in identity (a series read twice in one
    cycle starts two runs at the same time: they go in different statements)."""
    batches: list[dict[tuple[object, ...], _Run]] = []
    for run in runs:
        for batch in batches:
            if len(batch) < BATCH and run.identity not in batch:
                batch[run.identity] = run
                break
        else:
            batches.append({run.identity: run})
    return batches


_TABLE: Table = ArchivedSignal.__table__  # type: ignore[assignment]
_RUN_KEY = tuple(
    _TABLE.c[name] for name in ("node", "gpu", "kind", "code", "source", "label_set", "first_at")
)
_BY_ID = _TABLE.c.id == bindparam("row_id")
_RETIME = (
    update(_TABLE).where(_BY_ID).values(step_us=bindparam("step_us"), value=bindparam("value"))
)
_CLOSE = (
    update(_TABLE)
    .where(_BY_ID)
    .values(open=False, last_at=bindparam("last_at"), readings=bindparam("readings"))
)
_CLOSE_WITH_VALUE = _CLOSE.values(value=bindparam("value"))


def _micros(step: timedelta | None) -> int | None:
    return None if step is None else step // timedelta(microseconds=1)


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
        # Runs started, or re-timed at their second reading, whose row is not yet written.
        self._started: list[_Run] = []
        self._retimed: list[_Run] = []
        # Rows a previous leader left open are closed once, before this writer's first cycle.
        self._orphans_closed = False
        self._lock = threading.Lock()

    def record(
        self,
        signals: Sequence[Signal],
        nodes: Mapping[str, NodeSnapshot] | None,
        now: datetime,
    ) -> None:
        """Archive one intake cycle: extend or start runs, write the runs that started (open)
        and those that ended, the cycle and the node changes, in one transaction. When the
        database refuses, what is unwritten is kept for the next cycle and ArchiveUnavailable
        says why (this cycle's readings are lost)."""
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
                    if not self._orphans_closed:
                        _close_orphans(session, self.cluster)
                    written = self._write(session, signals, digests, now)
            except SQLAlchemyError as exc:
                raise ArchiveUnavailable(f"signal archive not written: {exc}") from exc
            self._written(written)

    def _written(self, ids: Sequence[tuple[_Run, int]]) -> None:
        """After a commit: learn the new rows' ids; nothing is pending any more."""
        for run, ident in ids:
            run.id = ident
        self._orphans_closed = True
        self._pending, self._pending_nodes, self._started, self._retimed = [], [], [], []

    def _write(
        self, session: Session, signals: Sequence[Signal], digests: Sequence[str], now: datetime
    ) -> list[tuple[_Run, int]]:
        ended, started, retimed = self._advance(signals, digests, now)
        self._pending += ended
        self._started += started
        self._retimed += retimed
        sources = sorted({s.source for s in signals})
        if sources:
            session.execute(
                _insert_for(session)(ArchivedCycle).on_conflict_do_nothing(),
                [{"cluster": self.cluster, "source": s, "at": now} for s in sources],
            )
        if self._pending_nodes:
            session.execute(insert(ArchivedNode), self._pending_nodes)
        return self._persist(session)

    def _persist(self, session: Session) -> list[tuple[_Run, int]]:
        """Insert the runs without a row (open or ended), close or re-time the others."""
        new = [r for r in self._started if r.id is None and not r.ended]
        new += [r for r in self._pending if r.id is None]
        ids: list[tuple[_Run, int]] = []
        # Core statements on the session's connection: the ORM's bulk paths cost more per row
        # than the database does. The ids come back in any order (asking for the rows' order
        # makes SQLite insert them one statement each): each is matched to its run by the
        # run's own key and start.
        connection = session.connection()
        returning = insert(_TABLE).returning(_TABLE.c.id, *_RUN_KEY)
        for batch in _unique_batches(new):
            rows = [run.row(self.cluster) for run in batch.values()]
            for found in connection.execute(returning, rows):
                run = batch.get(tuple(found)[1:])
                if run is None:
                    raise ArchiveUnavailable(f"signal archive: row {found.id} matches no run")
                ids.append((run, found.id))
        # A written row changes twice at most: its step, learnt at its second reading, and
        # its end. Each is one batched UPDATE of those columns alone, by primary key.
        retimed: list[dict[str, object]] = [
            {"row_id": r.id, "step_us": _micros(r.step), "value": r.value}
            for r in self._retimed
            if r.id is not None and not r.ended
        ]
        closing = [r.ending() for r in self._pending if r.id is not None]
        for statement, rows in (
            (_RETIME, retimed),
            (_CLOSE, [r for r in closing if "value" not in r]),
            (_CLOSE_WITH_VALUE, [r for r in closing if "value" in r]),
        ):
            for start in range(0, len(rows), BATCH):
                connection.execute(statement, rows[start : start + BATCH])
        return ids

    def flush(self) -> int:
        """Close every open run (at shutdown: the next leader starts its own)."""
        with self._lock:
            runs = list(self._open.values())
            for run in runs:
                run.ended = True
            self._open.clear()
            self._pending += runs
            count = len(self._pending)
            with session_scope(self._factory, write=True) as session:
                written = self._persist(session)
            self._written(written)
            return count

    def prune(self, before: datetime) -> int:
        """Retention: drop what ended before `before`, keeping each node's newest inventory row
        (a replay starts from it)."""
        with self._lock, session_scope(self._factory, write=True) as session:
            ended = func.coalesce(ArchivedSignal.last_at, ArchivedSignal.first_at)
            deleted: Any = session.execute(
                delete(ArchivedSignal).where(
                    ArchivedSignal.cluster == self.cluster,
                    ArchivedSignal.open.is_(False),
                    ended < before,
                )
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
    ) -> tuple[list[_Run], list[_Run], list[_Run]]:
        """Extend or start runs; returns those that ended, started and were re-timed."""
        closed: list[_Run] = []
        started: list[_Run] = []
        retimed: list[_Run] = []
        sources = {s.source for s in signals}
        previous = {s: self._last_cycle.get(s) for s in sources}
        seen: set[RunKey] = set()
        floors = self.floors
        for signal, digest in zip(signals, digests, strict=True):
            kind = _KIND_VALUES[signal.kind]
            key: RunKey = (signal.node, signal.gpu, kind, signal.code, signal.source, digest)
            run = self._open.get(key)
            value = signal.value
            floor = floors.get(kind)
            below = floor is not None and value is not None and value < floor
            observed = signal.observed_at
            if (
                run is not None
                and key not in seen
                and (run.value == value or (below and run.below_floor))
                and run.last == previous[signal.source]
                and now < run.cut_at
                and run.fits(observed, now)
            ):
                if run.readings == 1 and now - observed != run.lag:
                    run.step = observed - run.observed  # samples evenly spaced, polls not
                    retimed.append(run)
                run.last = now
                run.readings += 1
                if below and run.value is not None and value is not None and value > run.value:
                    run.value = value
                    run.value_changed = True
                seen.add(key)
                continue
            if run is not None:
                run.ended = True
                closed.append(run)
            label_set = self._label_ids[digest] if digest else None
            self._open[key] = fresh = _Run(
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
                observed,
                below,
                cut_at=now + (self.floor_max_run if below else self.max_run),
                lag=now - observed,
            )
            started.append(fresh)
            seen.add(key)
        for key, run in list(self._open.items()):
            if run.source in sources and key not in seen:
                run.ended = True
                closed.append(self._open.pop(key))
        for source in sources:
            self._last_cycle[source] = now
        return closed, started, retimed

    def _digest(self, signal: Signal) -> str:
        """The label set's digest; a series repeats its labels, so the last one is reused."""
        if not signal.labels and not signal.gpu_uuid:
            return ""
        series = (signal.node, signal.gpu, _KIND_VALUES[signal.kind], signal.code, signal.source)
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


def _source_cycles() -> ColumnElement[bool]:
    """A run row's source cycles from its first on (correlated with the outer run row)."""
    return and_(
        ArchivedCycle.cluster == ArchivedSignal.cluster,
        ArchivedCycle.source == ArchivedSignal.source,
        ArchivedCycle.at >= ArchivedSignal.first_at,
    )


# An open run has a reading at every cycle of its source since its first: read back, it ends
# at the newest cycle (the run's own row is brought up to date only when it ends).
_OPEN_LAST = select(func.max(ArchivedCycle.at)).where(_source_cycles()).scalar_subquery()
_OPEN_COUNT = (
    select(func.count()).select_from(ArchivedCycle).where(_source_cycles()).scalar_subquery()
)


def _close_orphans(session: Session, cluster: str) -> None:
    """Close the runs a previous writer (a crashed or replaced leader) left open: each ran up
    to its source's last cycle, written in the same transaction as its last reading."""
    session.execute(
        update(ArchivedSignal)
        .where(ArchivedSignal.cluster == cluster, ArchivedSignal.open.is_(True))
        .values(
            open=False,
            readings=_OPEN_COUNT,
            last_at=case((_OPEN_COUNT > 1, _OPEN_LAST), else_=null()),
        )
        .execution_options(synchronize_session=False)
    )


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


def archived_clusters(factory: sessionmaker[Session]) -> list[str]:
    """The clusters with any archived cycle, by name."""
    with session_scope(factory) as session:
        return sorted(session.scalars(select(ArchivedCycle.cluster).distinct()))


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
    type_coerce(
        case(
            (and_(ArchivedSignal.open, _OPEN_COUNT > 1), _OPEN_LAST),
            (ArchivedSignal.open, null()),
            else_=ArchivedSignal.last_at,
        ),
        UTCDateTime,
    ).label("last_at"),
    case((ArchivedSignal.open, _OPEN_COUNT), else_=ArchivedSignal.readings).label("readings"),
    ArchivedSignal.lag_ms,
    ArchivedSignal.observed_at,
    ArchivedSignal.step_us,
)


def _overlapping(since: datetime) -> ColumnElement[bool]:
    """Runs still open, or ended at or after `since`."""
    ended = func.coalesce(ArchivedSignal.last_at, ArchivedSignal.first_at)
    return or_(ArchivedSignal.open.is_(True), ended >= since)


def earliest_run(
    factory: sessionmaker[Session], cluster: str, since: datetime, until: datetime
) -> datetime | None:
    """The first reading of the earliest run overlapping the window: a replay counts a run's
    readings from there."""
    with session_scope(factory) as session:
        found: datetime | None = session.scalar(
            select(func.min(ArchivedSignal.first_at)).where(
                ArchivedSignal.cluster == cluster,
                ArchivedSignal.first_at < until,
                _overlapping(since),
            )
        )
        return found


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
    with session_scope(factory) as session:
        labels = _label_sets(session, cluster)
        if wanted is None:
            window = and_(
                ArchivedSignal.cluster == cluster,
                ArchivedSignal.first_at < until,
                _overlapping(since),
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
                ArchivedSignal.cluster == cluster, question, _overlapping(since)
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
    with session_scope(factory) as session:
        labels = _label_sets(session, cluster)
        rows = session.execute(
            select(*_RUN_COLUMNS)
            .where(
                ArchivedSignal.cluster == cluster,
                ArchivedSignal.first_at < until,
                _overlapping(since),
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
        observed_at=row.observed_at,
        step_us=row.step_us,
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
