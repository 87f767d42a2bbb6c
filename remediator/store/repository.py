"""Typed queries over the store for the remediation engine and the console, scoped to one cluster.

Every transition is one compare-and-set UPDATE (state and version must still be what the caller
saw) plus its timeline event, in one transaction: a lost race surfaces as ConflictError, never
as a silent double step. The unique partial index on open remediations per node is what makes
"one open remediation per node" hold under races; the pre-check only gives a friendlier error.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Date,
    Select,
    and_,
    cast,
    delete,
    func,
    insert,
    not_,
    or_,
    select,
    tuple_,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.errors import ConflictError, NotFoundError
from remediator.model.disruption import evictions
from remediator.model.states import OPEN, TERMINAL, State, check_transition
from remediator.signals.model import STORED, Signal, SignalKind
from remediator.store import cursor as cursors
from remediator.store.db import session_scope
from remediator.store.models import (
    OPEN_STATES,
    AgentHeartbeat,
    ControllerState,
    FleetRollupDay,
    ObservedSignal,
    PolicySet,
    Remediation,
    RemediationEvent,
    SourceHealth,
    UTCDateTime,
)
from remediator.store.records import (
    AgentStatus,
    ControllerStatus,
    DailyCount,
    EventRecord,
    NewRemediation,
    NodeHistory,
    Overview,
    Page,
    PolicySetRecord,
    QuarantineSpan,
    RemediationFilter,
    RemediationRecord,
    RepairTimes,
    SignalEntry,
    SourceStatus,
)
from remediator.store.stats import step_durations, summarise

# Bookkeeping a caller may change alongside (or without) a transition.
MUTABLE_FIELDS = frozenset(
    {
        "step_index",
        "ladder",
        "replacement_operation_id",
        "new_node",
        "hold_reason",
        "error",
        "attempts",
        "next_attempt_at",
        "queue_cause",
        "suppressed_until",
        "outcome",
    }
)
FINISHED = frozenset({State.SUCCEEDED, State.CANCELLED, State.FAILED})
OPEN_VALUES = OPEN_STATES
CLOSED_VALUES = tuple(sorted(s.value for s in State if s not in OPEN))
MAX_PAGE = 500
REPAIR_WINDOW = 10_000


class OpenRemediationExists(ConflictError):
    """The node already has an open remediation; `existing_id` names it."""

    def __init__(self, node: str, existing_id: int | None) -> None:
        super().__init__(f"node {node} already has open remediation {existing_id}")
        self.node = node
        self.existing_id = existing_id


def _unobserved(_before: State, _after: RemediationRecord) -> None:
    return None


class Repository:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self.session_factory = session_factory
        self.cluster = cluster
        self._clock: Clock = clock or SystemClock()
        self._open_listed: dict[int, RemediationRecord] = {}  # list_open's last, by id
        # Told (the state it left, the record) after each committed close: a remediation is
        # closed once, whatever closed it, so its outcome is counted here (the metrics).
        self.on_closed: Callable[[State, RemediationRecord], None] = _unobserved

    def now(self) -> datetime:
        """The store's clock, for commands that write a time (a cancel's cooldown)."""
        return self._clock.now()

    # -- remediations: writes ----------------------------------------------------------------

    def create(
        self,
        new: NewRemediation,
        *,
        actor: str,
        action: str = "detected",
        detail: Mapping[str, Any] | None = None,
        queued: str | None = None,
        hold_reason: str | None = None,
    ) -> RemediationRecord:
        """Persist a remediation in DETECTED (or QUEUED, when `queued` names the hold's cause)
        with its first event, atomically; refuse a second open remediation for the node with
        OpenRemediationExists."""
        signal_kind, xid_code = _classify(new)
        now = self._clock.now()
        state = State.QUEUED if queued else State.DETECTED
        row = Remediation(
            cluster=self.cluster,
            node=new.node,
            pool=new.pool,
            policy=new.policy,
            policy_priority=new.policy_priority,
            policy_commit=new.policy_commit,
            policy_hash=new.policy_hash,
            state=state.value,
            dry_run=new.dry_run,
            approval_required=new.approval_required,
            reason=new.reason,
            signal_kind=signal_kind,
            xid_code=xid_code,
            signals=[s.model_dump(mode="json") for s in new.signals],
            ladder=[dict(step) for step in new.ladder],
            step_index=0,
            idempotency_key=new.idempotency_key or uuid.uuid4().hex,
            attempts=0,
            queue_cause=queued,
            while_queued=new.while_queued,
            hold_reason=hold_reason,
            version=1,
            created_at=now,
            updated_at=now,
        )
        try:
            with session_scope(self.session_factory, write=True) as session:
                existing = self._open_for_node(session, new.node)
                if existing is not None:
                    raise OpenRemediationExists(new.node, existing)
                session.add(row)
                session.flush()
                event = self._event(row.id, now, None, state, action, detail, actor)
                session.add(event)
                session.flush()
                return _remediation(row, (_event_record(event),))
        except IntegrityError as exc:
            with session_scope(self.session_factory) as session:
                existing = self._open_for_node(session, new.node)
            if existing is None:
                raise
            raise OpenRemediationExists(new.node, existing) from exc

    def transition(
        self,
        remediation_id: int,
        expected_state: State,
        new_state: State,
        *,
        action: str,
        actor: str,
        detail: Mapping[str, Any] | None = None,
        expected_version: int | None = None,
        **field_updates: Any,
    ) -> RemediationRecord:
        """Move expected_state → new_state if nobody moved it first (else ConflictError), with
        the event and any bookkeeping fields in the same transaction."""
        check_transition(expected_state, new_state)
        values = _checked_fields(field_updates)
        now = self._clock.now()
        values["state"] = new_state.value
        if new_state in FINISHED:
            values["finished_at"] = now
        elif expected_state in FINISHED:
            values["finished_at"] = None
        with session_scope(self.session_factory, write=True) as session:
            state, version = self._current(session, remediation_id)
            if state != expected_state or expected_version not in (None, version):
                raise ConflictError(
                    f"remediation {remediation_id} is {state.value} v{version}, "
                    f"not {expected_state.value}"
                    + (f" v{expected_version}" if expected_version else "")
                )
            self._compare_and_set(session, remediation_id, expected_state, version, values, now)
            if expected_state in FINISHED:
                self._reopen_day(session, remediation_id)
            session.add(
                self._event(remediation_id, now, expected_state, new_state, action, detail, actor)
            )
            session.flush()
            after = self._load(session, remediation_id, with_events=False)
        if new_state in TERMINAL:
            self.on_closed(expected_state, after)
        return after

    def _reopen_day(self, session: Session, remediation_id: int) -> None:
        """A finished remediation that moves again (a retry) changes the fleet figures of the
        day it was detected: that day's rollup is dropped, to be built again."""
        created = session.scalar(
            select(Remediation.created_at).where(Remediation.id == remediation_id)
        )
        if created is not None:
            session.execute(
                delete(FleetRollupDay).where(
                    FleetRollupDay.cluster == self.cluster,
                    FleetRollupDay.day == created.astimezone(UTC).date(),
                )
            )

    def update_fields(
        self, remediation_id: int, expected_version: int, **fields: Any
    ) -> RemediationRecord:
        """Bookkeeping that is not a transition (attempts, next_attempt_at, operation id)."""
        values = _checked_fields(fields)
        now = self._clock.now()
        with session_scope(self.session_factory, write=True) as session:
            state, version = self._current(session, remediation_id)
            if version != expected_version:
                raise ConflictError(
                    f"remediation {remediation_id} is at v{version}, not v{expected_version}"
                )
            self._compare_and_set(session, remediation_id, state, version, values, now)
            return self._load(session, remediation_id, with_events=False)

    def append_event(
        self,
        remediation_id: int,
        *,
        action: str,
        actor: str,
        detail: Mapping[str, Any] | None = None,
    ) -> EventRecord:
        """A timeline line that is not a state change ("pod ns/x got SIGTERM, grace 120 s")."""
        now = self._clock.now()
        with session_scope(self.session_factory, write=True) as session:
            self._current(session, remediation_id)
            event = self._event(remediation_id, now, None, None, action, detail, actor)
            session.add(event)
            session.flush()
            return _event_record(event)

    # -- remediations: reads -----------------------------------------------------------------

    def get(self, remediation_id: int) -> RemediationRecord | None:
        with session_scope(self.session_factory) as session:
            try:
                return self._load(session, remediation_id, with_events=True)
            except NotFoundError:
                return None

    def with_events(self, records: Sequence[RemediationRecord]) -> tuple[RemediationRecord, ...]:
        """The same records with their timelines, in two queries (for short lists that need
        the history, like the console's waiting list)."""
        ids = [r.id for r in records]
        timelines: dict[int, list[EventRecord]] = {i: [] for i in ids}
        with session_scope(self.session_factory) as session:
            for event in session.scalars(
                select(RemediationEvent)
                .where(RemediationEvent.remediation_id.in_(ids))
                .order_by(RemediationEvent.remediation_id, RemediationEvent.at, RemediationEvent.id)
            ):
                timelines[event.remediation_id].append(_event_record(event))
        return tuple(replace(r, events=tuple(timelines[r.id])) for r in records)

    def has_open(self) -> bool:
        """Whether any remediation is open (queued included): one index read, no rows loaded."""
        query = (
            select(Remediation.id)
            .where(Remediation.cluster == self.cluster, Remediation.state.in_(OPEN_VALUES))
            .limit(1)
        )
        with session_scope(self.session_factory) as session:
            return session.execute(query).first() is not None

    def list_open(self) -> tuple[RemediationRecord, ...]:
        """Every open remediation, oldest first: what a restarted engine resumes. The leader
        lists them twice a tick; after a storm's 2,000 queued that was every row built again
        (its signals validated) each time, ~40 % of a core. A row changes only by a
        compare-and-set that moves its version, so only rows whose version is not the last
        list's are read whole."""
        keys = (
            select(Remediation.id, Remediation.version)
            .where(Remediation.cluster == self.cluster, Remediation.state.in_(OPEN_VALUES))
            .order_by(Remediation.created_at, Remediation.id)
        )
        last = self._open_listed
        with session_scope(self.session_factory) as session:
            listed = session.execute(keys).all()
            moved = [i for i, version in listed if i not in last or last[i].version != version]
            read = {
                row.id: _remediation(row)
                for start in range(0, len(moved), ID_CHUNK)
                for row in session.scalars(
                    select(Remediation).where(
                        Remediation.id.in_(moved[start : start + ID_CHUNK]),
                        Remediation.state.in_(OPEN_VALUES),
                    )
                )
            }
        # A row read whole may be newer than its key (PostgreSQL reads each statement anew);
        # one closed in between is left out, as a list a moment later would.
        unmoved = {i for i, _ in listed}.difference(moved)
        found = (last[i] if i in unmoved else read.get(i) for i, _ in listed)
        records = tuple(r for r in found if r is not None)
        self._open_listed = {r.id: r for r in records}
        return records

    def list(
        self,
        filters: RemediationFilter | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page:
        """Newest first (optionally open ones first), keyset-paginated; raises InvalidCursor.
        A cursor continues the listing it came from: its phase, not `in_flight_first`, says
        whether open ones come first."""
        filters = filters or RemediationFilter()
        limit = max(1, min(limit, MAX_PAGE))
        position = (
            cursors.decode(cursor)
            if cursor
            else cursors.Cursor(
                "open" if filters.in_flight_first else "all",
                None,
                None,
                self._clock.now() if filters.in_flight_first else None,
            )
        )
        rows: tuple[RemediationRecord, ...] = ()
        with session_scope(self.session_factory) as session:
            while True:
                wanted = limit - len(rows)
                query = self._page_query(filters, position).limit(wanted + 1)
                found = tuple(_remediation(r) for r in session.scalars(query))
                rows += found[:wanted]
                if len(found) > wanted:
                    last = rows[-1]
                    return Page(rows, cursors.encode(_after(position, last)))
                if position.phase != "open":
                    return Page(rows, None)
                position = cursors.Cursor("closed", None, None, position.as_of)
                if len(rows) == limit:
                    return Page(rows, self._next_if_any(session, filters, position))

    def list_suppressing(self, now: datetime) -> tuple[RemediationRecord, ...]:
        """Remediations a human cancelled whose "do not re-remediate" still holds at `now`."""
        query = (
            select(Remediation)
            .where(Remediation.cluster == self.cluster, Remediation.suppressed_until > now)
            .order_by(Remediation.created_at, Remediation.id)
        )
        with session_scope(self.session_factory) as session:
            return tuple(_remediation(r) for r in session.scalars(query))

    def node_history(self, node: str, limit: int = 100) -> NodeHistory:
        remediations = (
            select(Remediation)
            .where(Remediation.cluster == self.cluster, Remediation.node == node)
            .order_by(Remediation.created_at.desc(), Remediation.id.desc())
            .limit(limit)
        )
        with session_scope(self.session_factory) as session:
            found = tuple(_remediation(r) for r in session.scalars(remediations))
        return NodeHistory(node, found, self.signals_for_node(node, limit=limit))

    # -- overview ----------------------------------------------------------------------------

    def counts_by_state(self, closed_since: datetime | None = None) -> dict[State, int]:
        """Every open remediation by state; the others only if created at or after
        `closed_since` (when given), since counting a million finished rows is slow."""
        closed: ColumnElement[bool] = Remediation.state.in_(CLOSED_VALUES)
        if closed_since is not None:
            closed = and_(closed, Remediation.created_at >= closed_since)
        counts: dict[State, int] = {}
        with session_scope(self.session_factory) as session:
            for states in (Remediation.state.in_(OPEN_VALUES), closed):
                query = (
                    select(Remediation.state, func.count())
                    .where(Remediation.cluster == self.cluster, states)
                    .group_by(Remediation.state)
                )
                counts.update((State(state), count) for state, count in session.execute(query))
        return counts

    def failed_since(self, since: datetime) -> int:
        """Remediations that entered FAILED at or after `since` (even if retried since)."""
        query = select(func.count(func.distinct(RemediationEvent.remediation_id))).where(
            RemediationEvent.cluster == self.cluster,
            RemediationEvent.to_state == State.FAILED.value,
            RemediationEvent.at >= since,
        )
        with session_scope(self.session_factory) as session:
            return int(session.execute(query).scalar_one())

    def open_by_pool(self) -> dict[str, int]:
        """Open remediations per node pool; nodes without a pool count under ""."""
        query = (
            select(Remediation.pool, func.count())
            .where(Remediation.cluster == self.cluster, Remediation.state.in_(OPEN_VALUES))
            .group_by(Remediation.pool)
        )
        with session_scope(self.session_factory) as session:
            return {pool or "": count for pool, count in session.execute(query)}

    def count(self, filters: RemediationFilter) -> int:
        query = select(func.count()).where(
            Remediation.cluster == self.cluster, *_filter_clauses(filters)
        )
        with session_scope(self.session_factory) as session:
            return int(session.execute(query).scalar_one())

    def overview(self, closed_window: timedelta = timedelta(days=7)) -> Overview:
        """The overview's counts; the failed one is exactly what the list shows for
        `state=failed` and `finished_from` 24 hours ago, so the tile and its link agree."""
        now = self._clock.now()
        failed = RemediationFilter(
            states=frozenset({State.FAILED}), finished_from=now - timedelta(hours=24)
        )
        return Overview(
            self.counts_by_state(closed_since=now - closed_window),
            self.count(failed),
            self.open_by_pool(),
            self.counts_by_outcome(now - closed_window),
        )

    def counts_by_outcome(self, since: datetime) -> dict[str, int]:
        """Remediations that finished at or after `since`, by outcome (repaired, replaced)."""
        query = (
            select(Remediation.outcome, func.count())
            .where(
                Remediation.cluster == self.cluster,
                Remediation.outcome.is_not(None),
                Remediation.finished_at >= since,
            )
            .group_by(Remediation.outcome)
        )
        with session_scope(self.session_factory) as session:
            return {str(outcome): int(n) for outcome, n in session.execute(query)}

    def daily_counts_by_kind(self, days: int) -> tuple[DailyCount, ...]:
        """Remediations created per UTC day and signal kind over the last `days` days."""
        start = self._clock.now() - timedelta(days=days)
        with session_scope(self.session_factory) as session:
            day: ColumnElement[Any]
            if session.get_bind().dialect.name == "postgresql":
                day = cast(func.timezone("UTC", Remediation.created_at), Date)
            else:
                day = func.date(Remediation.created_at)
            query = (
                select(day.label("day"), Remediation.signal_kind, func.count())
                .where(Remediation.cluster == self.cluster, Remediation.created_at >= start)
                .group_by(day, Remediation.signal_kind)
                .order_by(day, Remediation.signal_kind)
            )
            return tuple(
                DailyCount(d if isinstance(d, date) else date.fromisoformat(d), kind, count)
                for d, kind, count in session.execute(query)
            )

    def daily_counts_by_outcome(self, days: int) -> tuple[DailyCount, ...]:
        """Succeeded remediations per UTC day they finished, by outcome (repaired, replaced)."""
        start = self._clock.now() - timedelta(days=days)
        with session_scope(self.session_factory) as session:
            day: ColumnElement[Any]
            if session.get_bind().dialect.name == "postgresql":
                day = cast(func.timezone("UTC", Remediation.finished_at), Date)
            else:
                day = func.date(Remediation.finished_at)
            query = (
                select(day.label("day"), Remediation.outcome, func.count())
                .where(
                    Remediation.cluster == self.cluster,
                    Remediation.outcome.is_not(None),
                    Remediation.finished_at >= start,
                )
                .group_by(day, Remediation.outcome)
                .order_by(day, Remediation.outcome)
            )
            return tuple(
                DailyCount(d if isinstance(d, date) else date.fromisoformat(d), str(o), count)
                for d, o, count in session.execute(query)
            )

    def time_to_repair(self, since: datetime, window: int = REPAIR_WINDOW) -> RepairTimes:
        """Median/p90 of detection → success, and of the stay in each state, over the newest
        `window` remediations that succeeded at or after `since`."""
        succeeded = (
            select(Remediation.id, Remediation.created_at, Remediation.finished_at)
            .where(
                Remediation.cluster == self.cluster,
                Remediation.state == State.SUCCEEDED.value,
                Remediation.finished_at >= since,
            )
            .order_by(Remediation.finished_at.desc())
            .limit(window)
        )
        with session_scope(self.session_factory) as session:
            done = session.execute(succeeded).all()
            ids = [row_id for row_id, _, _ in done]
            events = session.execute(
                select(
                    RemediationEvent.remediation_id,
                    RemediationEvent.at,
                    RemediationEvent.from_state,
                    RemediationEvent.to_state,
                )
                .where(
                    RemediationEvent.remediation_id.in_(ids),
                    RemediationEvent.to_state.is_not(None),
                )
                .order_by(RemediationEvent.remediation_id, RemediationEvent.at, RemediationEvent.id)
            )
            transitions = [(rid, at, frm, to) for rid, at, frm, to in events if to is not None]
        overall = summarise(
            (finished - created).total_seconds() for _, created, finished in done if finished
        )
        by_step = {
            state: stats
            for state, spent in step_durations(transitions).items()
            if (stats := summarise(spent)) is not None
        }
        return RepairTimes(overall, by_step)

    def change_marker(self) -> str:
        """A short string that changes whenever a remediation moves or gets a timeline line,
        the controller is paused, resumed or its breaker moves, or a source goes up or down:
        what the console polls to know a page is stale. Cheap: two index-only reads."""
        with session_scope(self.session_factory) as session:
            last_event = session.execute(
                select(func.max(RemediationEvent.id)).where(
                    RemediationEvent.cluster == self.cluster
                )
            ).scalar_one()
            controller = session.get(ControllerState, self.cluster)
            switches = (
                (controller.paused, controller.breaker_tripped, controller.paused_at)
                if controller
                else None
            )
        sources = tuple((s.source, s.up) for s in self.source_health())
        return hashlib.sha256(repr((last_event, switches, sources)).encode()).hexdigest()[:16]

    def quarantine_spans(self, since: datetime) -> tuple[QuarantineSpan, ...]:
        """The out-of-service span of every live remediation whose node was quarantined at or
        after `since` (dry runs fence nothing and are left out)."""
        return quarantine_spans(self.session_factory, (self.cluster,), since)

    # -- controller state --------------------------------------------------------------------

    def controller_status(self) -> ControllerStatus:
        with session_scope(self.session_factory) as session:
            row = session.get(ControllerState, self.cluster)
            return _controller(row) if row else ControllerStatus(cluster=self.cluster)

    def pause(self, *, by: str, reason: str) -> ControllerStatus:
        now = self._clock.now()
        return self._set_controller(paused=True, paused_by=by, paused_at=now, pause_reason=reason)

    def resume(self, *, by: str, reason: str) -> ControllerStatus:
        now = self._clock.now()
        return self._set_controller(paused=False, paused_by=by, paused_at=now, pause_reason=reason)

    def trip_breaker(self, *, reason: str) -> ControllerStatus:
        now = self._clock.now()
        return self._set_controller(
            breaker_tripped=True, breaker_reason=reason, breaker_tripped_at=now
        )

    def record_breaker_faults(self, faults: Sequence[tuple[str, datetime]]) -> None:
        """The breaker's fault window, so a restart or a failover mid-storm keeps the count."""
        self._set_controller(breaker_faults=[[node, at.isoformat()] for node, at in faults])

    def reset_breaker(self, *, by: str, reason: str) -> ControllerStatus:
        """A human's reset also empties the fault window: the faults that tripped it (their
        remediations queued) are never counted again."""
        now = self._clock.now()
        return self._set_controller(
            breaker_faults=[],
            breaker_tripped=False,
            breaker_reset_by=by,
            breaker_reset_at=now,
            breaker_reset_reason=reason,
        )

    def record_leader(self, identity: str) -> ControllerStatus:
        return self._set_controller(leader_identity=identity, leader_seen_at=self._clock.now())

    def _set_controller(self, **values: Any) -> ControllerStatus:
        now = self._clock.now()
        with session_scope(self.session_factory, write=True) as session:
            dialect_insert = _insert_for(session)
            session.execute(
                dialect_insert(ControllerState)
                .values(cluster=self.cluster, paused=False, breaker_tripped=False, updated_at=now)
                .on_conflict_do_nothing(index_elements=["cluster"])
            )
            session.execute(
                update(ControllerState)
                .where(ControllerState.cluster == self.cluster)
                .values(updated_at=now, **values)
            )
            row = session.get(ControllerState, self.cluster, populate_existing=True)
            assert row is not None
            return _controller(row)

    # -- source health -----------------------------------------------------------------------

    def record_source_health(self, source: str, *, up: bool, error: str | None = None) -> None:
        now = self._clock.now()
        with session_scope(self.session_factory, write=True) as session:
            dialect_insert = _insert_for(session)
            statement = dialect_insert(SourceHealth).values(
                cluster=self.cluster,
                source=source,
                up=up,
                checked_at=now,
                last_success_at=now if up else None,
                error=error,
            )
            changes: dict[str, Any] = {"up": up, "checked_at": now, "error": error}
            if up:
                changes["last_success_at"] = now
            session.execute(
                statement.on_conflict_do_update(index_elements=["cluster", "source"], set_=changes)
            )

    def source_health(self) -> tuple[SourceStatus, ...]:
        query = (
            select(SourceHealth)
            .where(SourceHealth.cluster == self.cluster)
            .order_by(SourceHealth.source)
        )
        with session_scope(self.session_factory) as session:
            return tuple(
                SourceStatus(r.source, r.up, r.checked_at, r.last_success_at, r.error)
                for r in session.scalars(query)
            )

    # -- node agents -------------------------------------------------------------------------

    def record_heartbeats(self, statuses: Sequence[AgentStatus]) -> None:
        """Upsert many agents' newest heartbeats in one transaction (the coalesced writer's
        batch, `store.heartbeats`): one statement executed for all rows."""
        if not statuses:
            return
        rows = [
            {
                "cluster": self.cluster,
                "node": s.node,
                "agent": s.agent,
                "version": s.version,
                "started_at": s.started_at,
                "seen_at": s.seen_at,
                "stats": dict(s.stats),
            }
            for s in statuses
        ]
        with session_scope(self.session_factory, write=True) as session:
            statement = _insert_for(session)(AgentHeartbeat.__table__)
            excluded = statement.excluded
            session.execute(
                statement.on_conflict_do_update(
                    index_elements=["cluster", "node"],
                    set_={
                        name: getattr(excluded, name)
                        for name in ("agent", "version", "started_at", "seen_at", "stats")
                    },
                ),
                rows,
            )

    def agent_statuses(self, seen_after: datetime | None = None) -> tuple[AgentStatus, ...]:
        """Every agent's row (or those seen after `seen_after`), as plain column tuples: ORM
        objects cost ~0.28 s per read at 10,000 agents, and the book reads them every few
        seconds while anyone looks."""
        table = AgentHeartbeat.__table__
        query = (
            select(
                table.c.node,
                table.c.agent,
                table.c.version,
                table.c.started_at,
                table.c.seen_at,
                table.c.stats,
            )
            .where(table.c.cluster == self.cluster)
            .order_by(table.c.node)
        )
        if seen_after is not None:
            query = query.where(table.c.seen_at > seen_after)
        with session_scope(self.session_factory) as session:
            return tuple(
                AgentStatus(node, agent, version, started, seen, dict(stats or {}))
                for node, agent, version, started, seen, stats in session.execute(query)
            )

    def agent_status(self, node: str) -> AgentStatus | None:
        with session_scope(self.session_factory) as session:
            row = session.get(AgentHeartbeat, (self.cluster, node))
            return _agent(row) if row else None

    # -- policy sets -------------------------------------------------------------------------

    def record_policy_set(
        self,
        *,
        content_hash: str,
        commit: str | None,
        dirty: bool,
        files: Mapping[str, str],
        status: str = "ok",
        error: str | None = None,
    ) -> PolicySetRecord:
        """Record a load; a reload identical to the latest record returns that record instead."""
        if status not in ("ok", "refused"):
            raise ValueError(f"policy set status must be ok or refused, not {status!r}")
        with session_scope(self.session_factory, write=True) as session:
            latest = session.scalars(
                select(PolicySet)
                .where(PolicySet.cluster == self.cluster)
                .order_by(PolicySet.loaded_at.desc(), PolicySet.id.desc())
                .limit(1)
            ).first()
            same = (content_hash, commit, dirty, status, error, dict(files))
            if latest is not None and same == (
                latest.content_hash,
                latest.commit,
                latest.dirty,
                latest.status,
                latest.error,
                latest.files,
            ):
                return _policy_set(latest)
            row = PolicySet(
                cluster=self.cluster,
                content_hash=content_hash,
                commit=commit,
                dirty=dirty,
                status=status,
                loaded_at=self._clock.now(),
                files=dict(files),
                error=error,
            )
            session.add(row)
            session.flush()
            return _policy_set(row)

    def policy_set_by_hash(self, content_hash: str) -> PolicySetRecord | None:
        """The policy text a remediation was decided under (its `policy_hash`)."""
        with session_scope(self.session_factory) as session:
            row = session.scalars(
                select(PolicySet)
                .where(PolicySet.cluster == self.cluster, PolicySet.content_hash == content_hash)
                .order_by(PolicySet.loaded_at.desc(), PolicySet.id.desc())
                .limit(1)
            ).first()
            return _policy_set(row) if row else None

    def latest_policy_set(self) -> PolicySetRecord | None:
        with session_scope(self.session_factory) as session:
            row = session.scalars(
                select(PolicySet)
                .where(PolicySet.cluster == self.cluster)
                .order_by(PolicySet.loaded_at.desc(), PolicySet.id.desc())
                .limit(1)
            ).first()
            return _policy_set(row) if row else None

    # -- signals -----------------------------------------------------------------------------

    def insert_signals(
        self,
        signals: Sequence[Signal],
        remediation_id: int | None = None,
        dispositions: Sequence[str | None] | None = None,
    ) -> int:
        """One batch; `dispositions`, when given, runs parallel to `signals`."""
        if not signals:
            return 0
        said = list(dispositions) if dispositions is not None else [None] * len(signals)
        rows = [
            {
                "cluster": self.cluster,
                "node": s.node,
                "gpu": s.gpu,
                "gpu_uuid": s.gpu_uuid,
                "kind": s.kind.value,
                "code": s.code,
                "value": s.value,
                "source": s.source,
                "observed_at": s.observed_at,
                "labels": dict(s.labels),
                "remediation_id": remediation_id,
                "disposition": disposition[:512] if disposition else None,
            }
            for s, disposition in zip(signals, said, strict=True)
        ]
        with session_scope(self.session_factory, write=True) as session:
            session.execute(insert(ObservedSignal), rows)
        return len(rows)

    def signals_for_node(
        self,
        node: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 500,
        after: tuple[datetime, int] | None = None,
    ) -> tuple[SignalEntry, ...]:
        """The node's observed signals, newest first, within [since, until); `after` is the
        (observed_at, id) of the last signal of the previous page."""
        query = select(ObservedSignal).where(
            ObservedSignal.cluster == self.cluster, *_signal_window(node, since, until)
        )
        if after is not None:
            query = query.where(tuple_(ObservedSignal.observed_at, ObservedSignal.id) < after)
        query = query.order_by(ObservedSignal.observed_at.desc(), ObservedSignal.id.desc()).limit(
            limit
        )
        with session_scope(self.session_factory) as session:
            return tuple(_signal_entry(r) for r in session.scalars(query))

    def count_signals(
        self, node: str, *, since: datetime | None = None, until: datetime | None = None
    ) -> int:
        query = select(func.count()).where(
            ObservedSignal.cluster == self.cluster, *_signal_window(node, since, until)
        )
        with session_scope(self.session_factory) as session:
            return int(session.execute(query).scalar_one())

    def replacement_of(self, node: str) -> RemediationRecord | None:
        """The newest remediation whose replacement is `node` (the node it replaced)."""
        query = (
            select(Remediation)
            .where(Remediation.cluster == self.cluster, Remediation.new_node == node)
            .order_by(Remediation.created_at.desc(), Remediation.id.desc())
            .limit(1)
        )
        with session_scope(self.session_factory) as session:
            row = session.scalars(query).first()
            return _remediation(row) if row else None

    # -- internals ---------------------------------------------------------------------------

    def _open_for_node(self, session: Session, node: str) -> int | None:
        return session.scalars(
            select(Remediation.id).where(
                Remediation.cluster == self.cluster,
                Remediation.node == node,
                Remediation.state.in_(OPEN_VALUES),
            )
        ).first()

    def _current(self, session: Session, remediation_id: int) -> tuple[State, int]:
        row = session.execute(
            select(Remediation.state, Remediation.version).where(
                Remediation.id == remediation_id, Remediation.cluster == self.cluster
            )
        ).first()
        if row is None:
            raise NotFoundError(f"remediation {remediation_id} not found in {self.cluster}")
        return State(row[0]), row[1]

    def _compare_and_set(
        self,
        session: Session,
        remediation_id: int,
        state: State,
        version: int,
        values: dict[str, Any],
        now: datetime,
    ) -> None:
        result = session.execute(
            update(Remediation)
            .where(
                Remediation.id == remediation_id,
                Remediation.cluster == self.cluster,
                Remediation.state == state.value,
                Remediation.version == version,
            )
            .values(version=version + 1, updated_at=now, **values)
            .execution_options(synchronize_session=False)
        )
        if getattr(result, "rowcount", 0) != 1:
            raise ConflictError(f"remediation {remediation_id} changed concurrently")

    def _load(
        self, session: Session, remediation_id: int, *, with_events: bool
    ) -> RemediationRecord:
        row = session.get(Remediation, remediation_id, populate_existing=True)
        if row is None or row.cluster != self.cluster:
            raise NotFoundError(f"remediation {remediation_id} not found in {self.cluster}")
        events: tuple[EventRecord, ...] = ()
        if with_events:
            events = tuple(
                _event_record(e)
                for e in session.scalars(
                    select(RemediationEvent)
                    .where(RemediationEvent.remediation_id == remediation_id)
                    .order_by(RemediationEvent.at, RemediationEvent.id)
                )
            )
        return _remediation(row, events)

    def _event(
        self,
        remediation_id: int,
        at: datetime,
        from_state: State | None,
        to_state: State | None,
        action: str,
        detail: Mapping[str, Any] | None,
        actor: str,
    ) -> RemediationEvent:
        return RemediationEvent(
            remediation_id=remediation_id,
            cluster=self.cluster,
            at=at,
            from_state=from_state.value if from_state else None,
            to_state=to_state.value if to_state else None,
            action=action,
            detail=dict(detail or {}),
            actor=actor,
        )

    def _page_query(
        self, filters: RemediationFilter, position: cursors.Cursor
    ) -> Select[Remediation]:
        query = select(Remediation).where(
            Remediation.cluster == self.cluster, *_filter_clauses(filters)
        )
        if position.phase != "all" and position.as_of is not None:
            open_then = _open_as_of(position.as_of)
            query = query.where(
                Remediation.created_at <= position.as_of,
                open_then if position.phase == "open" else not_(open_then),
            )
        if position.created_at is not None and position.id is not None:
            # Comparing with a plain tuple binds each value with its column's type (UTCDateTime).
            query = query.where(
                tuple_(Remediation.created_at, Remediation.id) < (position.created_at, position.id)
            )
        return query.order_by(Remediation.created_at.desc(), Remediation.id.desc())

    def _next_if_any(
        self, session: Session, filters: RemediationFilter, position: cursors.Cursor
    ) -> str | None:
        """After a page that ended exactly at the last open row: a cursor only if more follow."""
        more = session.scalars(self._page_query(filters, position).limit(1)).first()
        return cursors.encode(position) if more is not None else None


def quarantine_spans(
    session_factory: sessionmaker[Session], clusters: Sequence[str], since: datetime
) -> tuple[QuarantineSpan, ...]:
    """The spans of Repository.quarantine_spans, for several clusters in one read."""
    entered = _entered(RemediationEvent.cluster.in_(clusters), RemediationEvent.at >= since)
    with session_scope(session_factory) as session:
        return _spans(session, entered, Remediation.cluster.in_(clusters))


ID_CHUNK = 10_000  # ids per statement: well under PostgreSQL's 65,535 parameters


def quarantine_spans_of(
    session_factory: sessionmaker[Session], ids: Sequence[int]
) -> tuple[QuarantineSpan, ...]:
    """The spans of these remediations (those quarantined), read by id through the timeline's
    per-remediation index: the fleet figures' rollups ask for a day's or a few open ones."""
    found: list[QuarantineSpan] = []
    with session_scope(session_factory) as session:
        for start in range(0, len(ids), ID_CHUNK):
            chunk = ids[start : start + ID_CHUNK]
            entered = _entered(RemediationEvent.remediation_id.in_(chunk))
            found.extend(
                _spans(
                    session,
                    entered,
                    Remediation.id.in_(chunk),
                    # Said again on the timeline's own read, or PostgreSQL hashes the whole
                    # events table to join it (minutes at 15 million rows).
                    events_where=(RemediationEvent.remediation_id.in_(chunk),),
                )
            )
    return tuple(found)


def _entered(*where: ColumnElement[bool]) -> Any:
    """Each remediation's first entry into quarantine."""
    return (
        select(
            RemediationEvent.remediation_id,
            # Typed, so SQLite's text comes back as an aware datetime like the column.
            type_coerce(func.min(RemediationEvent.at), UTCDateTime()).label("at"),
        )
        .where(RemediationEvent.to_state == State.QUARANTINED.value, *where)
        .group_by(RemediationEvent.remediation_id)
        .subquery()
    )


def _spans(
    session: Session,
    entered: Any,
    *where: ColumnElement[bool],
    events_where: Sequence[ColumnElement[bool]] = (),
) -> tuple[QuarantineSpan, ...]:
    """`events_where`: the timeline read by these conditions instead of joined to `entered`."""
    query = (
        select(
            Remediation.id,
            Remediation.policy,
            Remediation.node,
            Remediation.state,
            Remediation.finished_at,
            entered.c.at,
        )
        .join(entered, entered.c.remediation_id == Remediation.id)
        .where(Remediation.dry_run.is_(False), *where)
    )
    rows = session.execute(query).all()
    counted: dict[int, int | None] = {}
    details: dict[int, list[dict[str, Any]]] = {}
    timeline = select(
        RemediationEvent.remediation_id, RemediationEvent.from_state, RemediationEvent.detail
    )
    if events_where:
        timeline = timeline.where(*events_where)
    else:
        # Joined, not `IN (ids)`: a fleet's month holds more ids than a statement takes
        # parameters (65,535 on PostgreSQL).
        timeline = timeline.join(
            entered, entered.c.remediation_id == RemediationEvent.remediation_id
        )
    dialect = session.get_bind().dialect
    for rid, from_state, detail in session.execute(timeline.order_by(RemediationEvent.id)):
        details.setdefault(rid, []).append(detail or {})
        if from_state == State.QUARANTINED.value:
            gpus = (detail or {}).get("gpus")
            counted.setdefault(rid, gpus if isinstance(gpus, int) else None)
    return tuple(
        QuarantineSpan(
            remediation_id=row.id,
            policy=row.policy,
            node=row.node,
            quarantined_at=UTCDateTime().process_result_value(row.at, dialect) or row.at,
            gpus=counted.get(row.id),
            ended_at=(
                row.finished_at
                if row.state in (State.SUCCEEDED.value, State.CANCELLED.value)
                else None
            ),
            evictions=evictions(details.get(row.id, ())),
        )
        for row in rows
    )


def _after(position: cursors.Cursor, last: RemediationRecord) -> cursors.Cursor:
    return cursors.Cursor(position.phase, last.created_at, last.id, position.as_of)


def _open_as_of(at: datetime) -> ColumnElement[bool]:
    """Whether a remediation was open at `at`: its last transition by then entered an open
    state. Only rows open now or finished since can have been, so the timeline is read for
    those alone."""
    state_then = (
        select(RemediationEvent.to_state)
        .where(
            RemediationEvent.remediation_id == Remediation.id,
            RemediationEvent.to_state.is_not(None),
            RemediationEvent.at <= at,
        )
        .order_by(RemediationEvent.at.desc(), RemediationEvent.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    maybe = or_(Remediation.state.in_(OPEN_VALUES), Remediation.finished_at > at)
    return and_(maybe, func.coalesce(state_then, Remediation.state).in_(OPEN_VALUES))


def _filter_clauses(filters: RemediationFilter) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = []
    if filters.node is not None:
        clauses.append(Remediation.node == filters.node)
    if filters.node_search:
        pattern = "%" + _escape_like(filters.node_search) + "%"
        clauses.append(Remediation.node.ilike(pattern, escape="\\"))
    if filters.pool is not None:
        clauses.append(Remediation.pool == filters.pool)
    if filters.states:
        clauses.append(Remediation.state.in_(sorted(s.value for s in filters.states)))
    if filters.signal_kind is not None:
        clauses.append(Remediation.signal_kind == filters.signal_kind)
    if filters.xid_code is not None:
        clauses.append(Remediation.xid_code == filters.xid_code)
    if filters.policy is not None:
        clauses.append(Remediation.policy == filters.policy)
    if filters.created_from is not None:
        clauses.append(Remediation.created_at >= filters.created_from)
    if filters.created_to is not None:
        clauses.append(Remediation.created_at < filters.created_to)
    if filters.dry_run is not None:
        clauses.append(Remediation.dry_run.is_(filters.dry_run))
    if filters.finished_from is not None:
        clauses.append(Remediation.finished_at >= filters.finished_from)
    if filters.outcome is not None:
        clauses.append(Remediation.outcome == filters.outcome)
    return clauses


def _signal_window(
    node: str, since: datetime | None, until: datetime | None
) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = [ObservedSignal.node == node]
    if since is not None:
        clauses.append(ObservedSignal.observed_at >= since)
    if until is not None:
        clauses.append(ObservedSignal.observed_at < until)
    return clauses


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _classify(new: NewRemediation) -> tuple[str, int | None]:
    first = new.signals[0] if new.signals else None
    kind = new.signal_kind or (first.kind.value if first else None)
    if kind is None:
        raise ValueError("a remediation needs a signal or an explicit signal_kind")
    xid = new.xid_code
    if xid is None and first is not None and first.kind is SignalKind.XID:
        xid = first.code
    return kind, xid


def _checked_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(fields) - MUTABLE_FIELDS
    if unknown:
        raise ValueError(f"cannot update {', '.join(sorted(unknown))}")
    values = dict(fields)
    if "ladder" in values:
        values["ladder"] = [dict(step) for step in values["ladder"]]
    return values


def _agent(row: AgentHeartbeat) -> AgentStatus:
    return AgentStatus(
        row.node, row.agent, row.version, row.started_at, row.seen_at, dict(row.stats or {})
    )


def _insert_for(session: Session) -> Any:
    """The dialect's INSERT, which (unlike the generic one) knows ON CONFLICT."""
    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


def _remediation(row: Remediation, events: tuple[EventRecord, ...] = ()) -> RemediationRecord:
    return RemediationRecord(
        id=row.id,
        cluster=row.cluster,
        node=row.node,
        pool=row.pool,
        policy=row.policy,
        policy_priority=row.policy_priority,
        policy_commit=row.policy_commit,
        policy_hash=row.policy_hash,
        state=State(row.state),
        dry_run=row.dry_run,
        approval_required=row.approval_required,
        reason=row.reason,
        signal_kind=row.signal_kind,
        xid_code=row.xid_code,
        signals=tuple(Signal.model_validate(s, context=STORED) for s in row.signals),
        ladder=tuple(row.ladder),
        step_index=row.step_index,
        idempotency_key=row.idempotency_key,
        replacement_operation_id=row.replacement_operation_id,
        new_node=row.new_node,
        hold_reason=row.hold_reason,
        error=row.error,
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        version=row.version,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
        events=events,
        queue_cause=row.queue_cause,
        while_queued=row.while_queued,
        suppressed_until=row.suppressed_until,
        outcome=row.outcome,
    )


def _event_record(row: RemediationEvent) -> EventRecord:
    return EventRecord(
        id=row.id,
        remediation_id=row.remediation_id,
        at=row.at,
        from_state=State(row.from_state) if row.from_state else None,
        to_state=State(row.to_state) if row.to_state else None,
        action=row.action,
        detail=row.detail,
        actor=row.actor,
    )


def _signal_entry(row: ObservedSignal) -> SignalEntry:
    fields = {
        "node": row.node,
        "kind": SignalKind(row.kind),
        "source": row.source,
        "observed_at": row.observed_at,
        "gpu": row.gpu,
        "gpu_uuid": row.gpu_uuid,
        "code": row.code,
        "value": row.value,
        "labels": row.labels,
    }
    signal = Signal.model_validate(fields, context=STORED)
    return SignalEntry(row.id, signal, row.remediation_id, row.disposition)


def _policy_set(row: PolicySet) -> PolicySetRecord:
    return PolicySetRecord(
        id=row.id,
        content_hash=row.content_hash,
        commit=row.commit,
        dirty=row.dirty,
        status=row.status,
        loaded_at=row.loaded_at,
        files=row.files,
        error=row.error,
    )


def _controller(row: ControllerState) -> ControllerStatus:
    return ControllerStatus(
        cluster=row.cluster,
        paused=row.paused,
        paused_by=row.paused_by,
        paused_at=row.paused_at,
        pause_reason=row.pause_reason,
        breaker_tripped=row.breaker_tripped,
        breaker_reason=row.breaker_reason,
        breaker_tripped_at=row.breaker_tripped_at,
        breaker_reset_by=row.breaker_reset_by,
        breaker_reset_at=row.breaker_reset_at,
        breaker_reset_reason=row.breaker_reset_reason,
        breaker_faults=tuple(
            (str(node), datetime.fromisoformat(str(at))) for node, at in row.breaker_faults or ()
        ),
        leader_identity=row.leader_identity,
        leader_seen_at=row.leader_seen_at,
        updated_at=row.updated_at,
    )


# The row-to-record mapping, for readers beside the repository (the fleet's queries).
remediation_record = _remediation
