"""Reads across every cluster of a shared database, for the fleet console: one row of figures
per cluster, and what waits for a human anywhere, most urgent first.

Each read is a handful of grouped queries over the partial open-remediation index and the
per-cluster event index, never a scan of the closed history, so 50 clusters with millions of
finished remediations cost what their open rows cost.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session, sessionmaker

from remediator.model.states import OPEN, WAITING_FOR_HUMAN, State
from remediator.store.clusters import ClusterRegistry
from remediator.store.db import session_scope
from remediator.store.fleet_breaker import RESET_COMMAND, ROW, WAS_TRIPPED
from remediator.store.models import (
    AuditEntry,
    ControllerState,
    FleetBreaker,
    FleetNodeCount,
    Remediation,
    RemediationEvent,
    SourceHealth,
)
from remediator.store.records import RemediationRecord
from remediator.store.repository import remediation_record

OPEN_VALUES = tuple(sorted(s.value for s in OPEN))
# Most urgent first: a stuck step (the node is out and nothing moves), a decision only a human
# can make, a failure, then an opt-out a workload asked for; the oldest first within each.
URGENCY: tuple[State, ...] = (
    State.HELD,
    State.AWAITING_APPROVAL,
    State.FAILED,
    State.HELD_BY_OPT_OUT,
)
FAILED_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class ClusterFigures:
    cluster: str
    in_flight: int = 0  # open and moving without a human (queued work is not)
    queued: int = 0  # held back by a budget, a breaker (the fleet's too) or a pause
    waiting_for_human: int = 0  # awaiting approval, or held by a workload's opt-out
    held: int = 0  # a step stuck, for a human to release
    failed: int = 0  # failures in the last day
    paused: bool = False
    breaker_tripped: bool = False
    breaker_reason: str | None = None
    fleet_breaker_holds: bool = False  # it takes part in the fleet breaker, which is tripped
    leader_identity: str | None = None
    leader_seen_at: datetime | None = None
    sources_down: tuple[str, ...] = field(default_factory=tuple)
    registered: bool = False
    # The newest cluster-wide command (pause, resume, reset-breaker): who, and when.
    last_command: str | None = None
    last_command_by: str | None = None
    last_command_at: datetime | None = None


class FleetQueries:
    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self.session_factory = session_factory
        self.registry = ClusterRegistry(session_factory)

    def clusters(self, visible: Collection[str] | None = None) -> tuple[str, ...]:
        names = self.registry.names()
        return tuple(n for n in names if visible is None or n in visible)

    def figures(
        self, now: datetime, visible: Collection[str] | None = None
    ) -> tuple[ClusterFigures, ...]:
        names = self.clusters(visible)
        if not names:
            return ()
        registered = set(self.registry.registered())
        with session_scope(self.session_factory) as session:
            waiting = [s.value for s in WAITING_FOR_HUMAN - {State.HELD}]
            human = [s.value for s in WAITING_FOR_HUMAN]
            queued = State.QUEUED.value
            open_rows = session.execute(
                select(
                    Remediation.cluster,
                    func.count().filter(Remediation.state.not_in([*human, queued])),
                    func.count().filter(Remediation.state.in_(waiting)),
                    func.count().filter(Remediation.state == State.HELD.value),
                    func.count().filter(Remediation.state == queued),
                )
                .where(Remediation.cluster.in_(names), Remediation.state.in_(OPEN_VALUES))
                .group_by(Remediation.cluster)
            ).all()
            failed_rows = session.execute(
                select(RemediationEvent.cluster, func.count())
                .where(
                    RemediationEvent.cluster.in_(names),
                    RemediationEvent.to_state == State.FAILED.value,
                    RemediationEvent.at >= now - FAILED_WINDOW,
                )
                .group_by(RemediationEvent.cluster)
            ).all()
            controllers = {
                row.cluster: row
                for row in session.scalars(
                    select(ControllerState).where(ControllerState.cluster.in_(names))
                )
            }
            down: dict[str, list[str]] = {}
            for health in session.scalars(
                select(SourceHealth).where(
                    SourceHealth.cluster.in_(names), SourceHealth.up.is_(False)
                )
            ):
                down.setdefault(health.cluster, []).append(health.source)
            held_by_fleet = _fleet_held(session, names)
        counts = {c: (int(a), int(b), int(h), int(q)) for c, a, b, h, q in open_rows}
        failed = {c: int(n) for c, n in failed_rows}
        result = []
        for name in names:
            in_flight, waiting_n, held, queued_n = counts.get(name, (0, 0, 0, 0))
            state = controllers.get(name)
            result.append(
                ClusterFigures(
                    cluster=name,
                    in_flight=in_flight,
                    waiting_for_human=waiting_n,
                    held=held,
                    queued=queued_n,
                    failed=failed.get(name, 0),
                    paused=bool(state and state.paused),
                    breaker_tripped=bool(state and state.breaker_tripped),
                    breaker_reason=state.breaker_reason if state else None,
                    fleet_breaker_holds=name in held_by_fleet,
                    leader_identity=state.leader_identity if state else None,
                    leader_seen_at=state.leader_seen_at if state else None,
                    sources_down=tuple(sorted(down.get(name, ()))),
                    registered=name in registered,
                    **_last_command(state),
                )
            )
        return tuple(result)

    def waiting(
        self,
        now: datetime,
        visible: Collection[str] | None = None,
        limit: int = 100,
    ) -> tuple[RemediationRecord, ...]:
        """What waits for a human across the fleet, most urgent first (see URGENCY); failures
        count for a day after they happened."""
        names = self.clusters(visible)
        if not names:
            return ()
        rank = {state.value: i for i, state in enumerate(URGENCY)}
        # Two indexed reads merged, not one OR (which keeps PostgreSQL off the indexes).
        waiting = select(Remediation).where(
            Remediation.cluster.in_(names),
            Remediation.state.in_([s.value for s in WAITING_FOR_HUMAN]),
        )
        # A failure's finish time, on the (cluster, state, finished_at) index: a year of a
        # fleet's failures is not read to find the last day's.
        failed = select(Remediation).where(
            Remediation.cluster.in_(names),
            Remediation.state == State.FAILED.value,
            Remediation.finished_at >= now - FAILED_WINDOW,
        )
        with session_scope(self.session_factory) as session:
            rows = [
                *session.scalars(
                    waiting.order_by(
                        case(rank, value=Remediation.state), Remediation.updated_at
                    ).limit(limit)
                ),
                *session.scalars(failed.order_by(Remediation.finished_at).limit(limit)),
            ]
            rows.sort(key=lambda row: (rank[row.state], row.updated_at, row.id))
            return tuple(remediation_record(row) for row in rows[:limit])

    def cluster_of(self, remediation_id: int) -> str | None:
        with session_scope(self.session_factory) as session:
            found: str | None = session.scalar(
                select(Remediation.cluster).where(Remediation.id == remediation_id)
            )
            return found


def _fleet_held(session: Session, names: Collection[str]) -> frozenset[str]:
    """The clusters a tripped fleet breaker stops: those taking part in it (their controllers
    report their node count for its base)."""
    breaker = session.get(FleetBreaker, ROW)
    if breaker is None or not breaker.tripped:
        return frozenset()
    return _taking_part(session, names)


def _taking_part(session: Session, names: Collection[str]) -> frozenset[str]:
    return frozenset(
        session.scalars(
            select(FleetNodeCount.cluster).where(FleetNodeCount.cluster.in_(list(names)))
        )
    )


def _last_command(state: ControllerState | None) -> dict[str, Any]:
    """The newest of the pause/resume and the breaker reset, as the console wrote them."""
    if state is None:
        return {}
    found: list[tuple[datetime, str, str | None]] = []
    if state.paused_at is not None:
        found.append((state.paused_at, "pause" if state.paused else "resume", state.paused_by))
    if state.breaker_reset_at is not None:
        found.append((state.breaker_reset_at, "reset-breaker", state.breaker_reset_by))
    if not found:
        return {}
    at, command, by = max(found, key=lambda item: item[0])
    return {"last_command": command, "last_command_by": by, "last_command_at": at}


UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True)
class FaultRow:
    """One remediation of the window, as the fleet figures group it."""

    id: int
    cluster: str
    pool: str
    gpu_model: str
    day: date
    outcome: str | None
    repair_seconds: float | None  # detection to back in service, for the succeeded
    created_at: datetime
    open: bool = False  # still moving: its figures may change


def fault_rows(
    session_factory: sessionmaker[Session],
    names: Collection[str],
    since: datetime,
    until: datetime,
) -> tuple[FaultRow, ...]:
    """Every live (not dry-run) remediation detected in [since, until) in these clusters, with
    the GPU model its first signal named (DCGM's modelName label), else "unknown"."""
    if not names:
        return ()
    return _fault_rows(
        session_factory,
        Remediation.cluster.in_(list(names)),
        Remediation.created_at >= since,
        Remediation.created_at < until,
    )


ROW_CHUNK = 10_000  # ids per statement: well under PostgreSQL's 65,535 parameters


def fault_rows_of(
    session_factory: sessionmaker[Session], ids: Sequence[int]
) -> tuple[FaultRow, ...]:
    """These remediations' rows (the live ones), read by id."""
    found: list[FaultRow] = []
    for start in range(0, len(ids), ROW_CHUNK):
        chunk = list(ids[start : start + ROW_CHUNK])
        found.extend(_fault_rows(session_factory, Remediation.id.in_(chunk)))
    return tuple(found)


def _fault_rows(
    session_factory: sessionmaker[Session], *where: ColumnElement[bool]
) -> tuple[FaultRow, ...]:
    model = Remediation.signals[(0, "labels", "modelName")].as_string()
    query = select(
        Remediation.id,
        Remediation.cluster,
        Remediation.pool,
        model,
        Remediation.created_at,
        Remediation.finished_at,
        Remediation.state,
        Remediation.outcome,
    ).where(Remediation.dry_run.is_(False), *where)
    with session_scope(session_factory) as session:
        found = []
        for rid, cluster, pool, gpu_model, created, finished, state, outcome in session.execute(
            query
        ):
            succeeded = state == State.SUCCEEDED.value and finished is not None
            found.append(
                FaultRow(
                    id=rid,
                    cluster=cluster,
                    pool=pool or "",
                    gpu_model=gpu_model or UNKNOWN_MODEL,
                    day=created.date(),
                    outcome=outcome,
                    repair_seconds=(finished - created).total_seconds() if succeeded else None,
                    open=state in OPEN_VALUES,
                    created_at=created,
                )
            )
        return tuple(found)


def breaker_trips(
    session_factory: sessionmaker[Session], names: Collection[str], since: datetime
) -> dict[str, int]:
    """Storm breaker trips per cluster since `since`: each human reset ended one trip, and a
    breaker tripped now is one more (the controller keeps no other record of trips)."""
    if not names:
        return {}
    with session_scope(session_factory) as session:
        trips = {
            cluster: int(n)
            for cluster, n in session.execute(
                select(AuditEntry.cluster, func.count())
                .where(
                    AuditEntry.cluster.in_(list(names)),
                    AuditEntry.command == "reset-breaker",
                    AuditEntry.outcome == "done",
                    AuditEntry.at >= since,
                )
                .group_by(AuditEntry.cluster)
            )
        }
        for row in session.scalars(
            select(ControllerState).where(
                ControllerState.cluster.in_(list(names)), ControllerState.breaker_tripped
            )
        ):
            if row.breaker_tripped_at is not None and row.breaker_tripped_at >= since:
                trips[row.cluster] = trips.get(row.cluster, 0) + 1
        return trips


def fleet_breaker_trips(
    session_factory: sessionmaker[Session], names: Collection[str], since: datetime
) -> dict[str, int]:
    """Fleet-breaker trips since `since` for each of these clusters that takes part in it: a
    human's reset of a tripped fleet breaker (audited in every cluster) ended one, and a fleet
    breaker tripped now is one more. A cluster that does not take part was never stopped."""
    if not names:
        return {}
    with session_scope(session_factory) as session:
        taking_part = _taking_part(session, names)
        if not taking_part:
            return {}
        trips = {
            cluster: int(n)
            for cluster, n in session.execute(
                select(AuditEntry.cluster, func.count())
                .where(
                    AuditEntry.cluster.in_(list(taking_part)),
                    AuditEntry.command == RESET_COMMAND,
                    AuditEntry.outcome == "done",
                    AuditEntry.detail.startswith(WAS_TRIPPED, autoescape=True),
                    AuditEntry.at >= since,
                )
                .group_by(AuditEntry.cluster)
            )
        }
        breaker = session.get(FleetBreaker, ROW)
        tripped_at = breaker.tripped_at if breaker is not None and breaker.tripped else None
        if tripped_at is not None and tripped_at >= since:
            for cluster in taking_part:
                trips[cluster] = trips.get(cluster, 0) + 1
        return trips
