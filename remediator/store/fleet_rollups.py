"""The fleet figures' daily rollups: each cluster's finished days summed once per cluster, day,
pool and GPU model, so a month of a 50-cluster fleet is a few thousand rows, not the 400,000
remediations and their timelines it summarises.

Each cluster's day is summed on the first read of a window that holds it, up to SKEW ago
(controllers' clocks may run behind the console's), and moved on by later reads as the day goes
(today every REFRESH at most). What a read computes afresh is only what the sums do not cover:
remediations still open when their day was summed (`pending`) and those detected after its
cover. A finished one that moves again (a retry) drops its day's marker in the same transaction
(Repository.transition), so the day is summed again.

A read asks the database for the sums per cluster, pool and GPU model and per cluster and day
(a few hundred rows, not one per day and group), and for the repair times as packed float64s.
The spans of the remediations it computes afresh are kept between reads and read again only for
those whose timeline grew.
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
        result = Figures()
        if not names:
            return result
        today = now.astimezone(UTC).date()
        days = [first_day + timedelta(days=n) for n in range((today - first_day).days + 1)]
        covers = self._covers(names, first_day, today)
        # From when each cluster's day is read afresh: all of it when never summed.
        fresh_from: dict[tuple[str, date], datetime] = {}
        for cluster in names:
            for day in days:
                cover = covers.get((cluster, day))
                if cover is None or cover.until < _end(day):
                    fresh_from[(cluster, day)] = cover.until if cover else _start(day)
        self._summed(result, names, first_day, today)
        fresh: list[FaultRow] = []
        if fresh_from:
            clusters = sorted({c for c, _ in fresh_from})
            since = min(fresh_from.values())
            fresh = [
                row
                for row in fault_rows(
                    self.session_factory, clusters, since, now + timedelta(seconds=1)
                )
                if (at := fresh_from.get((row.cluster, row.day))) is not None
                and row.created_at >= at
            ]
        pending = fault_rows_of(
            self.session_factory, [rid for cover in covers.values() for rid in cover.pending]
        )
        rows = [*fresh, *pending]
        spans = self._spans_of([row.id for row in rows])
        self._extend(covers, fresh_from, rows, spans, now)
        for key, found in tally(rows, spans).items():
            result.add(key, found)
        return result

    def _covers(
        self, names: Collection[str], first_day: date, today: date
    ) -> dict[tuple[str, date], Cover]:
        with session_scope(self.session_factory) as session:
            return {
                (cluster, day): Cover(until, tuple(pending))
                for cluster, day, until, pending in session.execute(
                    select(
                        FleetRollupDay.cluster,
                        FleetRollupDay.day,
                        FleetRollupDay.covered_until,
                        FleetRollupDay.pending,
                    ).where(
                        FleetRollupDay.cluster.in_(list(names)),
                        FleetRollupDay.day >= first_day,
                        FleetRollupDay.day <= today,
                    )
                )
            }

    def _summed(self, into: Figures, names: Collection[str], first_day: date, today: date) -> None:
        """The stored rows of the window's summed days, added up by the database. Rows of a
        day whose marker a retry dropped are stale until it is rebuilt: joined to the markers."""
        r = FleetRollup
        covered = and_(FleetRollupDay.cluster == r.cluster, FleetRollupDay.day == r.day)
        window = (r.cluster.in_(list(names)), r.day >= first_day, r.day <= today)
        group = (r.cluster, r.pool, r.gpu_model)
        sums = select(
            *group,
            *(func.sum(column) for column in _sums(r)),
        ).join(FleetRollupDay, covered)
        repairs: dict[Group, list[bytes]] = {}
        with session_scope(self.session_factory) as session:
            for cluster, pool, model, *values in session.execute(
                sums.where(*window).group_by(*group)
            ):
                into.groups[(cluster, pool, model)] = _tally_of(values, [])
            for cluster, day, faults in session.execute(
                select(r.cluster, r.day, func.sum(r.faults))
                .join(FleetRollupDay, covered)
                .where(*window)
                .group_by(r.cluster, r.day)
            ):
                into.daily[(cluster, day)] = int(faults)
            for cluster, pool, model, packed in session.execute(
                select(*group, r.repair_seconds)
                .join(FleetRollupDay, covered)
                .where(*window, func.length(r.repair_seconds) > 0)
            ):
                repairs.setdefault((cluster, pool, model), []).append(packed)
        for key, parts in repairs.items():
            into.groups[key].repairs = _unpack(b"".join(parts))

    def _stored(self, keys: Sequence[tuple[str, date]]) -> dict[Key, Tally]:
        """The rows of these days, one per group: the base their covers move on from."""
        r = FleetRollup
        found: dict[Key, Tally] = {}
        with session_scope(self.session_factory) as session:
            for start in range(0, len(keys), 1000):
                for cluster, day, pool, model, packed, *values in session.execute(
                    select(
                        r.cluster, r.day, r.pool, r.gpu_model, r.repair_seconds, *_sums(r)
                    ).where(tuple_(r.cluster, r.day).in_(keys[start : start + 1000]))
                ):
                    found[(cluster, day, pool, model)] = _tally_of(values, _unpack(packed))
        return found

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
        self._spans = kept  # swapped whole: a concurrent read keeps the one it started with
        return {rid: span for rid, (_, span) in kept.items() if span is not None}

    def _extend(
        self,
        covers: Mapping[tuple[str, date], Cover],
        fresh_from: Mapping[tuple[str, date], datetime],
        rows: list[FaultRow],
        spans: Mapping[int, QuarantineSpan],
        now: datetime,
    ) -> None:
        """Move on the covers that can move: up to SKEW ago (a controller's clock may run that
        far behind ours), by REFRESH at least, so a busy day is written every few minutes, not
        on every read. A day's new rollup is its old one plus what finished since; what is
        still open stays pending. Best effort: a console that cannot write (another reader
        moved the day first, a read-only replica) serves what it computed."""
        horizon = now - SKEW
        moving: dict[tuple[str, date], datetime] = {}
        for key, since in fresh_from.items():
            until = min(_end(key[1]), horizon)
            if until > _start(key[1]) and (key not in covers or until - since >= REFRESH):
                moving[key] = until
        if not moving:
            return
        pending: dict[tuple[str, date], list[int]] = {key: [] for key in moving}
        groups = self._stored([key for key in moving if key in covers])
        for row in rows:
            cover = moving.get((row.cluster, row.day))
            if cover is None or row.created_at >= cover:
                continue
            if row.open:
                pending[(row.cluster, row.day)].append(row.id)
            else:
                group = (row.cluster, row.day, row.pool, row.gpu_model)
                groups.setdefault(group, Tally()).add(row, spans.get(row.id))
        keys = list(moving)
        try:
            with session_scope(self.session_factory, write=True) as session:
                for start in range(0, len(keys), 1000):
                    chunk = keys[start : start + 1000]
                    session.execute(
                        delete(FleetRollup).where(
                            tuple_(FleetRollup.cluster, FleetRollup.day).in_(chunk)
                        )
                    )
                    session.execute(
                        delete(FleetRollupDay).where(
                            tuple_(FleetRollupDay.cluster, FleetRollupDay.day).in_(chunk)
                        )
                    )
                session.add_all(
                    FleetRollupDay(
                        cluster=c, day=d, pending=ids, covered_until=moving[(c, d)], built_at=now
                    )
                    for (c, d), ids in pending.items()
                )
                session.add_all(_row_of(key, found) for key, found in groups.items())
        except SQLAlchemyError as error:
            log.info("fleet figures: %d day(s) not rolled up this time: %s", len(keys), error)


ID_CHUNK = 10_000  # ids per statement: well under PostgreSQL's 65,535 parameters


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
