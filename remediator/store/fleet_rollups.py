"""The fleet figures' daily rollups: each cluster's finished days summed once per cluster, day,
pool and GPU model, so a month of a 50-cluster fleet is a few thousand rows, not the 400,000
remediations and their timelines it summarises.

Each cluster's day is summed on the first read of a window that holds it, up to SKEW ago
(controllers' clocks may run behind the console's), and moved on by later reads as the day goes
(today every REFRESH at most). What a read computes afresh is only what the sums do not cover:
remediations still open when their day was summed (`pending`) and those detected after its
cover. A finished one that moves again (a retry) drops its day's marker in the same transaction
(Repository.transition), so the day is summed again.

A read asks the database for the sums per cluster, pool and GPU model (a few hundred rows, not
one per day and group) and for the repair times as packed float64s; each day's faults, for the
daily chart, are on its marker. The spans of the remediations it computes afresh are kept
between reads and read again only for those whose timeline grew.
"""

from __future__ import annotations

import logging
import sys
from array import array
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, select, tuple_
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from remediator.store.db import session_scope
from remediator.store.fleet import FaultRow, fault_rows, fault_rows_of
from remediator.store.models import FleetRollup, FleetRollupDay, RemediationEvent
from remediator.store.records import QuarantineSpan
from remediator.store.repository import quarantine_spans_of

log = logging.getLogger(__name__)

SKEW = timedelta(hours=1)
REFRESH = timedelta(minutes=15)
Key = tuple[str, date, str, str]  # cluster, day, pool, GPU model
Group = tuple[str, str, str]  # cluster, pool, GPU model


@dataclass
class Tally:
    """The figures of one group. Spans still open (a failed remediation holds its node until a
    human acts) are kept as sums linear in time, so the GPU-hours are exact at any `now`."""

    faults: int = 0
    repaired: int = 0
    replaced: int = 0
    repairs: list[float] = field(default_factory=list)
    lost_hours: float = 0.0
    lost_open_gpus: int = 0
    lost_open_gpu_seconds: float = 0.0
    disrupted_hours: float = 0.0
    disrupted_open_gpus: int = 0
    disrupted_open_gpu_seconds: float = 0.0

    def add(self, row: FaultRow, span: QuarantineSpan | None) -> None:
        self.faults += 1
        self.repaired += row.outcome == "repaired"
        self.replaced += row.outcome == "replaced"
        if row.repair_seconds is not None:
            self.repairs.append(row.repair_seconds)
        if span is None:
            return
        if span.gpus is not None:
            if span.ended_at is not None:
                seconds = (span.ended_at - span.quarantined_at).total_seconds()
                self.lost_hours += span.gpus * max(0.0, seconds) / 3600
            else:
                self.lost_open_gpus += span.gpus
                self.lost_open_gpu_seconds += span.gpus * span.quarantined_at.timestamp()
        for eviction in span.evictions:
            until = eviction.rescheduled_at or span.ended_at
            if until is not None:
                seconds = (until - eviction.evicted_at).total_seconds()
                self.disrupted_hours += eviction.gpus * max(0.0, seconds) / 3600
            else:
                self.disrupted_open_gpus += eviction.gpus
                self.disrupted_open_gpu_seconds += eviction.gpus * eviction.evicted_at.timestamp()

    def merge(self, other: Tally) -> None:
        self.faults += other.faults
        self.repaired += other.repaired
        self.replaced += other.replaced
        self.repairs.extend(other.repairs)
        self.lost_hours += other.lost_hours
        self.lost_open_gpus += other.lost_open_gpus
        self.lost_open_gpu_seconds += other.lost_open_gpu_seconds
        self.disrupted_hours += other.disrupted_hours
        self.disrupted_open_gpus += other.disrupted_open_gpus
        self.disrupted_open_gpu_seconds += other.disrupted_open_gpu_seconds

    def lost(self, now: datetime) -> float:
        """GPU-hours out of service up to `now`."""
        grown = self.lost_open_gpus * now.timestamp() - self.lost_open_gpu_seconds
        return self.lost_hours + max(0.0, grown) / 3600

    def disrupted(self, now: datetime) -> float:
        """Workload GPU-hours disrupted up to `now`."""
        grown = self.disrupted_open_gpus * now.timestamp() - self.disrupted_open_gpu_seconds
        return self.disrupted_hours + max(0.0, grown) / 3600


def tally(rows: Iterable[FaultRow], spans: Mapping[int, QuarantineSpan]) -> dict[Key, Tally]:
    found: dict[Key, Tally] = {}
    for row in rows:
        found.setdefault((row.cluster, row.day, row.pool, row.gpu_model), Tally()).add(
            row, spans.get(row.id)
        )
    return found


@dataclass
class Figures:
    """A window's figures: per cluster, pool and GPU model, and the faults per cluster and day
    (the fleet's daily chart)."""

    groups: dict[Group, Tally] = field(default_factory=dict)
    daily: dict[tuple[str, date], int] = field(default_factory=dict)

    def add(self, key: Key, found: Tally) -> None:
        cluster, day, pool, model = key
        self.groups.setdefault((cluster, pool, model), Tally()).merge(found)
        self.daily[(cluster, day)] = self.daily.get((cluster, day), 0) + found.faults


@dataclass(frozen=True)
class Cover:
    """How far a cluster's day is summed: its remediations detected before `until`, the
    finished ones in the rollup rows and the open ones as `pending`."""

    until: datetime
    pending: tuple[int, ...]


class FleetRollups:
    """One per console: it keeps the spans of the remediations its reads compute afresh."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory
        # remediation id -> (its count of events when read, its span or None if never
        # quarantined)
        self._spans: dict[int, tuple[int, QuarantineSpan | None]] = {}

    def figures(self, names: Collection[str], first_day: date, now: datetime) -> Figures:
        """Every group of these clusters detected from `first_day` to now: the days' rollups,
        plus afresh what they do not cover (their pending remediations, and those detected
        after their cover or on a day never summed); the covers moved on for the next read."""
        if not names:
            return Figures()
        read = self._read(names, first_day, now)
        fresh: list[FaultRow] = []
        if read.fresh_from:
            clusters = sorted({c for c, _ in read.fresh_from})
            since = min(read.fresh_from.values())
            fresh = [
                row
                for row in fault_rows(
                    self.session_factory, clusters, since, now + timedelta(seconds=1)
                )
                if (at := read.fresh_from.get((row.cluster, row.day))) is not None
                and row.created_at >= at
            ]
        pending = fault_rows_of(
            self.session_factory,
            [rid for cover in read.covers.values() for rid in cover.pending],
        )
        rows = [*fresh, *pending]
        spans = self._spans_of([row.id for row in rows])
        self._extend(read, rows, spans, now)
        for key, found in tally(rows, spans).items():
            read.figures.add(key, found)
        return read.figures

    def _read(self, names: Collection[str], first_day: date, now: datetime) -> _Read:
        """The window's covers and, in the same snapshot (so they agree with the covers), its
        rows added up by the database and the rows of the days whose cover moves now."""
        today = now.astimezone(UTC).date()
        days = [first_day + timedelta(days=n) for n in range((today - first_day).days + 1)]
        r, d = FleetRollup, FleetRollupDay
        window = (r.cluster.in_(list(names)), r.day >= first_day, r.day <= today)
        covered = and_(d.cluster == r.cluster, d.day == r.day)
        group = (r.cluster, r.pool, r.gpu_model)
        figures = Figures()
        repairs: dict[Group, list[bytes]] = {}
        with session_scope(self.session_factory) as session:
            # Core rows, not the ORM's: ~16,000 rows of repair times for a month. SQLite's
            # read transaction is a snapshot already.
            snapshot = {"isolation_level": "REPEATABLE READ"}
            postgres = session.get_bind().dialect.name == "postgresql"
            conn = session.connection(execution_options=snapshot if postgres else None)
            covers: dict[tuple[str, date], Cover] = {}
            for cluster, day, until, pending, faults in conn.execute(
                select(d.cluster, d.day, d.covered_until, d.pending, d.faults).where(
                    d.cluster.in_(list(names)), d.day >= first_day, d.day <= today
                )
            ):
                covers[(cluster, day)] = Cover(until, tuple(pending))
                if faults:
                    figures.daily[(cluster, day)] = faults
            fresh_from = _fresh_from(covers, names, days)
            moving = _moving(covers, fresh_from, now)
            # Rows of a day whose marker a retry dropped are stale until it is rebuilt: the
            # rows are joined to their markers.
            for cluster, pool, model, *values in conn.execute(
                select(*group, *(func.sum(c) for c in _sums(r)))
                .join(d, covered)
                .where(*window)
                .group_by(*group)
            ):
                figures.groups[(cluster, pool, model)] = _tally_of(values, [])
            for cluster, pool, model, packed in conn.execute(
                select(*group, r.repair_seconds)
                .join(d, covered)
                .where(*window, func.length(r.repair_seconds) > 0)
            ):
                repairs.setdefault((cluster, pool, model), []).append(packed)
            base: dict[Key, Tally] = {}
            summed = [key for key in moving if key in covers]
            for start in range(0, len(summed), 1000):
                for cluster, day, pool, model, packed, *values in conn.execute(
                    select(
                        r.cluster, r.day, r.pool, r.gpu_model, r.repair_seconds, *_sums(r)
                    ).where(tuple_(r.cluster, r.day).in_(summed[start : start + 1000]))
                ):
                    base[(cluster, day, pool, model)] = _tally_of(values, _unpack(packed))
        for key, parts in repairs.items():
            figures.groups[key].repairs = _unpack(b"".join(parts))
        return _Read(covers, fresh_from, moving, figures, base)

    def _spans_of(self, ids: Sequence[int]) -> dict[int, QuarantineSpan]:
        """These remediations' spans, read again only for those whose timeline grew since the
        last read: a span is a function of the timeline, which is append-only, and every change
        of state writes its event in the same transaction. The counts are read before the
        spans, so a span read later than its count is read once more, never kept stale."""
        counts: dict[int, int] = {}
        with session_scope(self.session_factory) as session:
            for start in range(0, len(ids), ID_CHUNK):
                chunk = list(ids[start : start + ID_CHUNK])
                counts.update(
                    (rid, int(n))
                    for rid, n in session.execute(
                        select(RemediationEvent.remediation_id, func.count())
                        .where(RemediationEvent.remediation_id.in_(chunk))
                        .group_by(RemediationEvent.remediation_id)
                    )
                )
        kept = {
            rid: entry
            for rid in ids
            if (entry := self._spans.get(rid)) is not None and entry[0] == counts.get(rid, 0)
        }
        missing = [rid for rid in ids if rid not in kept]
        read = {s.remediation_id: s for s in quarantine_spans_of(self.session_factory, missing)}
        for rid in missing:
            kept[rid] = (counts.get(rid, 0), read.get(rid))
        # Kept across reads of other windows and clusters (a console serves several users)
        # up to KEPT_SPANS, and swapped, not changed in place: a concurrent read keeps the
        # one it started with. Entries no read asks for are never trusted unchecked anyway.
        older = self._spans if len(self._spans) < KEPT_SPANS else {}
        self._spans = {**older, **kept}
        return {rid: span for rid, (_, span) in kept.items() if span is not None}

    def _extend(
        self,
        read: _Read,
        rows: list[FaultRow],
        spans: Mapping[int, QuarantineSpan],
        now: datetime,
    ) -> None:
        """Move on the covers that can move: a day's new rollup is its old one plus what
        finished since; what is still open stays pending. Best effort: a console that cannot
        write (a read-only replica), or finds a marker it read gone or moved (a retry dropped
        it, another console moved it first), serves what it computed and writes nothing."""
        if not read.moving:
            return
        pending: dict[tuple[str, date], list[int]] = {key: [] for key in read.moving}
        groups = dict(read.base)  # read for this write alone
        for row in rows:
            cover = read.moving.get((row.cluster, row.day))
            if cover is None or row.created_at >= cover:
                continue
            if row.open:
                pending[(row.cluster, row.day)].append(row.id)
            else:
                group = (row.cluster, row.day, row.pool, row.gpu_model)
                groups.setdefault(group, Tally()).add(row, spans.get(row.id))
        keys = list(read.moving)
        # Each marker as it was read: deleted only if still so, else the day moved under us.
        was = [(c, d, read.covers[(c, d)].until) for c, d in keys if (c, d) in read.covers]
        d = FleetRollupDay
        try:
            with session_scope(self.session_factory, write=True) as session:
                gone = 0
                for start in range(0, len(was), 1000):
                    result = session.execute(
                        delete(d).where(
                            tuple_(d.cluster, d.day, d.covered_until).in_(was[start : start + 1000])
                        )
                    )
                    gone += getattr(result, "rowcount", 0)
                if gone != len(was):
                    raise _Moved(f"{len(was) - gone} of {len(was)} day(s) moved since read")
                for start in range(0, len(keys), 1000):
                    session.execute(
                        delete(FleetRollup).where(
                            tuple_(FleetRollup.cluster, FleetRollup.day).in_(
                                keys[start : start + 1000]
                            )
                        )
                    )
                faults: dict[tuple[str, date], int] = {}
                for (c, day, _, _), found in groups.items():
                    faults[(c, day)] = faults.get((c, day), 0) + found.faults
                session.add_all(
                    d(
                        cluster=c,
                        day=day,
                        pending=ids,
                        covered_until=read.moving[(c, day)],
                        built_at=now,
                        faults=faults.get((c, day), 0),
                    )
                    for (c, day), ids in pending.items()
                )
                session.add_all(_row_of(key, found) for key, found in groups.items())
        except (SQLAlchemyError, _Moved) as error:
            log.info("fleet figures: %d day(s) not rolled up this time: %s", len(keys), error)


class _Moved(Exception):
    """A day's marker changed between the read and the write: its rollup is left as it is."""


@dataclass
class _Read:
    """What one snapshot of the rollups says about a window."""

    covers: dict[tuple[str, date], Cover]
    fresh_from: dict[tuple[str, date], datetime]  # each day not summed whole: from when
    moving: dict[tuple[str, date], datetime]  # the days whose cover moves now: to when
    figures: Figures  # the summed rows added up
    base: dict[Key, Tally]  # the rows of the moving days that were summed in part


def _fresh_from(
    covers: Mapping[tuple[str, date], Cover], names: Collection[str], days: Sequence[date]
) -> dict[tuple[str, date], datetime]:
    """From when each cluster's day is read afresh: all of it when never summed."""
    found: dict[tuple[str, date], datetime] = {}
    for cluster in names:
        for day in days:
            cover = covers.get((cluster, day))
            if cover is None or cover.until < _end(day):
                found[(cluster, day)] = cover.until if cover else _start(day)
    return found


def _moving(
    covers: Mapping[tuple[str, date], Cover],
    fresh_from: Mapping[tuple[str, date], datetime],
    now: datetime,
) -> dict[tuple[str, date], datetime]:
    """The covers that move on now, and to when: up to SKEW ago (a controller's clock may run
    that far behind ours), by REFRESH at least, so a busy day is written every few minutes,
    not on every read."""
    horizon = now - SKEW
    moving: dict[tuple[str, date], datetime] = {}
    for key, since in fresh_from.items():
        until = min(_end(key[1]), horizon)
        if until > _start(key[1]) and (key not in covers or until - since >= REFRESH):
            moving[key] = until
    return moving


ID_CHUNK = 10_000  # ids per statement: well under PostgreSQL's 65,535 parameters
KEPT_SPANS = 20_000  # a fleet's open remediations and last hour, many times over


def _sums(r: type[FleetRollup]) -> tuple[Any, ...]:
    """The columns that add up across days, in Tally's order."""
    return (
        r.faults,
        r.repaired,
        r.replaced,
        r.lost_hours,
        r.lost_open_gpus,
        r.lost_open_gpu_seconds,
        r.disrupted_hours,
        r.disrupted_open_gpus,
        r.disrupted_open_gpu_seconds,
    )


def _start(day: date) -> datetime:
    return datetime.combine(day, time.min, UTC)


def _end(day: date) -> datetime:
    return _start(day + timedelta(days=1))


def _pack(values: Sequence[float]) -> bytes:
    packed = array("d", values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _unpack(packed: bytes) -> list[float]:
    values = array("d")
    values.frombytes(packed)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def _tally_of(values: Sequence[Any], repairs: list[float]) -> Tally:
    """A Tally from the columns of _sums, in order (converted: each database returns its
    sums in types of its own)."""
    faults, repaired, replaced, lost, lost_gpus, lost_seconds, dis, dis_gpus, dis_seconds = values
    return Tally(
        faults=int(faults),
        repaired=int(repaired),
        replaced=int(replaced),
        repairs=repairs,
        lost_hours=float(lost),
        lost_open_gpus=int(lost_gpus),
        lost_open_gpu_seconds=float(lost_seconds),
        disrupted_hours=float(dis),
        disrupted_open_gpus=int(dis_gpus),
        disrupted_open_gpu_seconds=float(dis_seconds),
    )


def _row_of(key: Key, found: Tally) -> FleetRollup:
    cluster, day, pool, gpu_model = key
    return FleetRollup(
        cluster=cluster,
        day=day,
        pool=pool,
        gpu_model=gpu_model,
        faults=found.faults,
        repaired=found.repaired,
        replaced=found.replaced,
        repair_seconds=_pack(found.repairs),
        lost_hours=found.lost_hours,
        lost_open_gpus=found.lost_open_gpus,
        lost_open_gpu_seconds=found.lost_open_gpu_seconds,
        disrupted_hours=found.disrupted_hours,
        disrupted_open_gpus=found.disrupted_open_gpus,
        disrupted_open_gpu_seconds=found.disrupted_open_gpu_seconds,
    )
