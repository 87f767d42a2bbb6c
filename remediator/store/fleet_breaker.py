"""The fleet-wide breaker in the shared database: its one row, the shared fault window and each
taking-part cluster's node count. Every controller of the fleet reads and writes it; a trip is a
compare-and-set (only the first controller to see the storm records it), a reset is a human's."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.policy.fleet_breaker import FleetFaultSeen
from remediator.store.db import session_scope
from remediator.store.models import FleetBreaker, FleetFault, FleetNodeCount

ROW = "fleet"
# The human reset's audit row, in every cluster: the fleet figures count trips from it.
RESET_COMMAND = "reset-fleet-breaker"
WAS_TRIPPED = "was tripped: "


@dataclass(frozen=True)
class FleetBreakerStatus:
    tripped: bool = False
    tripped_at: datetime | None = None
    tripped_by: str | None = None
    reason: str | None = None
    reset_by: str | None = None
    reset_at: datetime | None = None
    reset_reason: str | None = None


def _status(row: FleetBreaker | None) -> FleetBreakerStatus:
    if row is None:
        return FleetBreakerStatus()
    return FleetBreakerStatus(
        tripped=row.tripped,
        tripped_at=row.tripped_at,
        tripped_by=row.tripped_by,
        reason=row.reason,
        reset_by=row.reset_by,
        reset_at=row.reset_at,
        reset_reason=row.reset_reason,
    )


class FleetBreakerStore:
    def __init__(self, session_factory: sessionmaker[Session], clock: Clock | None = None) -> None:
        self.session_factory = session_factory
        self.clock: Clock = clock or SystemClock()

    def status(self) -> FleetBreakerStatus:
        with session_scope(self.session_factory) as session:
            return _status(session.get(FleetBreaker, ROW))

    def record(
        self, cluster: str, nodes: int, faulted: Collection[str], since: datetime, now: datetime
    ) -> None:
        """This cluster's node count, and its newly faulted nodes (a node already in the window
        keeps its first time); its rows older than `since` leave the window. Stamped with the
        cycle's `now`, not the clock's: the verdict that cycle takes counts up to its `now`,
        and a fault written a moment later would be left out of it."""
        with session_scope(self.session_factory, write=True) as session:
            session.execute(
                delete(FleetFault).where(FleetFault.cluster == cluster, FleetFault.at <= since)
            )
            count = session.get(FleetNodeCount, cluster)
            if count is None:
                session.add(FleetNodeCount(cluster=cluster, nodes=nodes, at=now))
            elif count.nodes != nodes:
                count.nodes, count.at = nodes, now
            if faulted:
                present = set(
                    session.scalars(
                        select(FleetFault.node).where(
                            FleetFault.cluster == cluster, FleetFault.node.in_(list(faulted))
                        )
                    )
                )
                for node in sorted(set(faulted) - present):
                    session.add(FleetFault(cluster=cluster, node=node, at=now))

    def window(self, since: datetime) -> tuple[tuple[FleetFaultSeen, ...], dict[str, int]]:
        """The shared fault window after `since` and every taking-part cluster's node count."""
        with session_scope(self.session_factory) as session:
            faults = tuple(
                FleetFaultSeen(row.cluster, row.node, row.at)
                for row in session.scalars(select(FleetFault).where(FleetFault.at > since))
            )
            nodes = {row.cluster: row.nodes for row in session.scalars(select(FleetNodeCount))}
        return faults, nodes

    def trip(self, *, reason: str, by_cluster: str) -> bool:
        """True when this call tripped it; False when another controller already had."""
        now = self.clock.now()
        with session_scope(self.session_factory, write=True) as session:
            _ensure_row(session, now)
            done = session.execute(
                update(FleetBreaker)
                .where(FleetBreaker.id == ROW, FleetBreaker.tripped.is_(False))
                .values(
                    tripped=True,
                    tripped_at=now,
                    tripped_by=by_cluster,
                    reason=reason,
                    updated_at=now,
                )
            )
            return bool(getattr(done, "rowcount", 0))

    def reset(self, *, by: str, reason: str) -> FleetBreakerStatus:
        """A human's reset also empties the shared window: the faults that tripped it (their
        remediations queued) are never counted again."""
        now = self.clock.now()
        with session_scope(self.session_factory, write=True) as session:
            _ensure_row(session, now)
            row = session.get_one(FleetBreaker, ROW)
            row.tripped = False
            row.reset_by, row.reset_at, row.reset_reason = by, now, reason
            row.updated_at = now
            session.execute(delete(FleetFault))
            session.flush()
            return _status(row)


def _ensure_row(session: Session, now: datetime) -> None:
    """The one row, created by whichever controller or console writes first (two at once:
    the second's insert does nothing)."""
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(
        insert(FleetBreaker)
        .values(id=ROW, tripped=False, updated_at=now)
        .on_conflict_do_nothing(index_elements=["id"])
    )
