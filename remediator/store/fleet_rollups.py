"""The fleet figures' daily rollups: each cluster's finished days summed once per cluster, day,
pool and GPU model, so a month of a 50-cluster fleet is a few thousand rows, not the 400,000
remediations and their timelines it summarises.

Each cluster's day is summed on the first read of a window that holds it, up to SKEW ago
(controllers' clocks may run behind the console's), and moved on by later reads as the day goes
(today every REFRESH at most). What a read computes afresh is only what the sums do not cover:
remediations still open when their day was summed (`pending`) and those detected after its
cover. A finished one that moves again (a retry) drops its day's marker in the same transaction
(Repository.transition), so the day is summed again.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import delete, select, tuple_
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from remediator.store.db import session_scope
from remediator.store.fleet import FaultRow, fault_rows, fault_rows_of
from remediator.store.models import FleetRollup, FleetRollupDay
from remediator.store.records import QuarantineSpan
from remediator.store.repository import quarantine_spans_of

log = logging.getLogger(__name__)

SKEW = timedelta(hours=1)
REFRESH = timedelta(minutes=15)
Key = tuple[str, date, str, str]  # cluster, day, pool, GPU model


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


@dataclass(frozen=True)
class Cover:
    """How far a cluster's day is summed: its remediations detected before `until`, the
    finished ones in the rollup rows and the open ones as `pending`."""

    until: datetime
    pending: tuple[int, ...]


class FleetRollups:
    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory

    def tallies(self, names: Collection[str], first_day: date, now: datetime) -> dict[Key, Tally]:
        """Every group of these clusters detected from `first_day` to now: each day's rollup,
        plus afresh what it does not cover (its pending remediations, and those detected after
        its cover or on a day never summed); the covers moved on for the next read."""
        if not names:
            return {}
        today = now.astimezone(UTC).date()
        days = [first_day + timedelta(days=n) for n in range((today - first_day).days + 1)]
        covers, stored = self._read(names, first_day, today)
        # From when each cluster's day is read afresh: all of it when never summed.
        fresh_from: dict[tuple[str, date], datetime] = {}
        for cluster in names:
            for day in days:
                cover = covers.get((cluster, day))
                if cover is None or cover.until < _end(day):
                    fresh_from[(cluster, day)] = cover.until if cover else _start(day)
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
        spans = {
            s.remediation_id: s
            for s in quarantine_spans_of(self.session_factory, [row.id for row in rows])
        }
        self._extend(covers, stored, fresh_from, rows, spans, now)
        result = stored  # read for this call alone: _extend copied what it keeps
        for key, found in tally(rows, spans).items():
            result.setdefault(key, Tally()).merge(found)
        return result

    def _read(
        self, names: Collection[str], first_day: date, today: date
    ) -> tuple[dict[tuple[str, date], Cover], dict[Key, Tally]]:
        with session_scope(self.session_factory) as session:
            covers = {
                (row.cluster, row.day): Cover(row.covered_until, tuple(row.pending))
                for row in session.scalars(
                    select(FleetRollupDay).where(
                        FleetRollupDay.cluster.in_(list(names)),
                        FleetRollupDay.day >= first_day,
                        FleetRollupDay.day <= today,
                    )
                )
            }
            stored: dict[Key, Tally] = {}
            # Columns, not ORM objects: a month of a 50-cluster fleet is ~20,000 rows.
            for row in session.execute(
                select(*FleetRollup.__table__.columns).where(
                    FleetRollup.cluster.in_(list(names)),
                    FleetRollup.day >= first_day,
                    FleetRollup.day <= today,
                )
            ):
                # Rows of a day whose marker a retry dropped are stale until it is rebuilt.
                if (row.cluster, row.day) in covers:
                    stored[(row.cluster, row.day, row.pool, row.gpu_model)] = _tally_of(row)
        return covers, stored

    def _extend(
        self,
        covers: Mapping[tuple[str, date], Cover],
        stored: Mapping[Key, Tally],
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
        groups: dict[Key, Tally] = {
            key: _copy(found) for key, found in stored.items() if key[:2] in moving
        }
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


def _start(day: date) -> datetime:
    return datetime.combine(day, time.min, UTC)


def _end(day: date) -> datetime:
    return _start(day + timedelta(days=1))


def _copy(found: Tally) -> Tally:
    copied = Tally()
    copied.merge(found)
    return copied


def _tally_of(row: Any) -> Tally:
    return Tally(
        faults=row.faults,
        repaired=row.repaired,
        replaced=row.replaced,
        repairs=list(row.repair_seconds),
        lost_hours=row.lost_hours,
        lost_open_gpus=row.lost_open_gpus,
        lost_open_gpu_seconds=row.lost_open_gpu_seconds,
        disrupted_hours=row.disrupted_hours,
        disrupted_open_gpus=row.disrupted_open_gpus,
        disrupted_open_gpu_seconds=row.disrupted_open_gpu_seconds,
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
        repair_seconds=found.repairs,
        lost_hours=found.lost_hours,
        lost_open_gpus=found.lost_open_gpus,
        lost_open_gpu_seconds=found.lost_open_gpu_seconds,
        disrupted_hours=found.disrupted_hours,
        disrupted_open_gpus=found.disrupted_open_gpus,
        disrupted_open_gpu_seconds=found.disrupted_open_gpu_seconds,
    )
