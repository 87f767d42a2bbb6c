"""The fleet figures' daily rollups: each cluster's finished days summed once per cluster, day,
pool and GPU model, so a month of a 50-cluster fleet is a few thousand rows, not the 400,000
remediations and their timelines it summarises.

A day is built on the first read of a window that holds it, once it ended more than SETTLE ago
(controllers' clocks may run behind the console's). Its remediations still open then are kept
as `pending` and computed afresh on every read; a finished one that moves again (a retry)
drops its day's marker in the same transaction (Repository.transition), so the day is built
again. Today is always computed afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import delete, select, tuple_
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from remediator.store.db import session_scope
from remediator.store.fleet import FaultRow, fault_rows, fault_rows_of
from remediator.store.models import FleetRollup, FleetRollupDay
from remediator.store.records import QuarantineSpan
from remediator.store.repository import quarantine_spans_of

log = logging.getLogger(__name__)

SETTLE = timedelta(hours=1)
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


class FleetRollups:
    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory

    def tallies(self, names: Collection[str], first_day: date, now: datetime) -> dict[Key, Tally]:
        """Every group of these clusters detected from `first_day` to now: built days from
        their rollups plus their pending remediations, the other days computed (and the
        settled ones among them built for the next read)."""
        if not names:
            return {}
        today = now.astimezone(UTC).date()
        days = [first_day + timedelta(days=n) for n in range((today - first_day).days + 1)]
        built, stored = self._read(names, first_day, today)
        missing = {(c, d) for c in names for d in days if (c, d) not in built}
        fresh: list[FaultRow] = []
        if missing:
            since = datetime.combine(min(d for _, d in missing), time.min, UTC)
            clusters = sorted({c for c, _ in missing})
            fresh = [
                row
                for row in fault_rows(
                    self.session_factory, clusters, since, now + timedelta(seconds=1)
                )
                if (row.cluster, row.day) in missing
            ]
        pending = [rid for ids in built.values() for rid in ids]
        rows = [*fresh, *fault_rows_of(self.session_factory, pending)]
        spans = {
            s.remediation_id: s
            for s in quarantine_spans_of(self.session_factory, [row.id for row in rows])
        }
        settled = (now - SETTLE).astimezone(UTC).date()
        buildable = {(c, d) for c, d in missing if d < settled}
        if buildable:
            self._build(
                buildable, [r for r in fresh if (r.cluster, r.day) in buildable], spans, now
            )
        result = stored
        for key, found in tally(rows, spans).items():
            result.setdefault(key, Tally()).merge(found)
        return result

    def _read(
        self, names: Collection[str], first_day: date, today: date
    ) -> tuple[dict[tuple[str, date], list[int]], dict[Key, Tally]]:
        with session_scope(self.session_factory) as session:
            built = {
                (row.cluster, row.day): list(row.pending)
                for row in session.scalars(
                    select(FleetRollupDay).where(
                        FleetRollupDay.cluster.in_(list(names)),
                        FleetRollupDay.day >= first_day,
                        FleetRollupDay.day <= today,
                    )
                )
            }
            stored: dict[Key, Tally] = {}
            for row in session.scalars(
                select(FleetRollup).where(
                    FleetRollup.cluster.in_(list(names)),
                    FleetRollup.day >= first_day,
                    FleetRollup.day <= today,
                )
            ):
                # Rows of a day whose marker a retry dropped are stale until it is rebuilt.
                if (row.cluster, row.day) in built:
                    stored[(row.cluster, row.day, row.pool, row.gpu_model)] = _tally_of(row)
        return built, stored

    def _build(
        self,
        days: set[tuple[str, date]],
        rows: list[FaultRow],
        spans: Mapping[int, QuarantineSpan],
        now: datetime,
    ) -> None:
        """Write these days' rollups of their finished remediations, the open ones' ids as
        pending. Best effort: a console that cannot write (another reader built the day first,
        a read-only replica) serves what it computed and leaves the day to a later read."""
        pending: dict[tuple[str, date], list[int]] = {day: [] for day in days}
        for row in rows:
            if row.open:
                pending[(row.cluster, row.day)].append(row.id)
        groups = tally([row for row in rows if not row.open], spans)
        keys = list(days)
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
                    FleetRollupDay(cluster=c, day=d, pending=ids, built_at=now)
                    for (c, d), ids in pending.items()
                )
                session.add_all(_row_of(key, found) for key, found in groups.items())
        except SQLAlchemyError as error:
            log.info("fleet figures: %d day(s) not rolled up this time: %s", len(days), error)


def _tally_of(row: FleetRollup) -> Tally:
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
