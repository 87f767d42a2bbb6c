"""The executor: one tick of one remediation — observe through the state's action, ask the
planner, persist the transition, then (on the next loop) run the next state's action.

Crash safety comes from the order: a transition is committed (compare-and-set on state and
version) before the next step's side effect starts, and every action is idempotent, so a process
killed at any point resumes each remediation by re-running the action of the state it was in.
Step start times come from the stored timeline, never from memory, so a restart neither extends a
checkpoint grace nor restarts a drain timeout. The replacement's idempotency key is derived from
the remediation's own key, so a retried request finds the operation already granted.

A remediation that waits (for pods to answer or go, for a node to turn Ready) is due again at
its retry time, or at once when a watch reports a change on its node (`wake_node`): waits end
when the thing happens, and the retry time is only the fallback.

Fences outlive steps: the fence owner (remediator/fences/) keeps every fence the store requires
and lifts one only on a decision this store recorded.

The states that wait for a human get no action, with one exception: a validation held because
the node could not run its Job is looked at every poll (steps/job_hold.py) and goes back to
validating by itself once the Job runs, by the same compare-and-set as every move.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from remediator.actions.drain import Drainer
from remediator.actions.jobs import JobSettings
from remediator.actions.notify import Notification, NotificationKind
from remediator.actions.optout import check_opt_out, recorded_jobs
from remediator.actions.outcome import Done, Held, Outcome
from remediator.actions.pods import OPT_OUT_LABEL
from remediator.actions.quarantine import Why
from remediator.clock import Clock
from remediator.errors import (
    ApiUnavailable,
    ConflictError,
    IllegalTransition,
    NotFoundError,
    PermanentError,
    RemediatorError,
    TransientError,
)
from remediator.fences.derive import QUEUED_CORDON, QUEUED_RELEASE, last_queued_action
from remediator.fences.fencer import Fencer
from remediator.kube.client import KubeClient
from remediator.model.disruption import evictions, rescheduled
from remediator.model.optout import DEFAULT_MAX_HOLD, escalation_due, span
from remediator.model.states import State
from remediator.policy.budget import HoldCause
from remediator.policy.ladder import LadderStep, parse_ladder
from remediator.providers.base import NodePoolProvider
from remediator.remediation import planner
from remediator.remediation.journal import entered_at, log_transition
from remediator.remediation.node_gone import end_gone
from remediator.remediation.planner import Move, Situation, Stay
from remediator.remediation.queued_fence import fence_unit, release_unit
from remediator.remediation.steps import STEPS, StepContext, domain, job_hold
from remediator.remediation.steps.context import DEFAULT_JOBS, replacements, signal_text
from remediator.remediation.steps.grace import opt_out_released
from remediator.rma.evidence import HardwareSource
from remediator.rma.webhook import RmaWebhook
from remediator.slurm.engine import SlurmSteps, both
from remediator.store.optouts import OptOutBook
from remediator.store.records import RemediationRecord
from remediator.store.repository import Repository

log = logging.getLogger(__name__)

MAX_MOVES_PER_TICK = 12
# The states that need no action until a human (or the console) moves them on (but for the
# holds steps/job_hold.py looks at again).
HUMAN_STATES = frozenset({State.AWAITING_APPROVAL, State.HELD, State.FAILED})


class Notifier(Protocol):
    def send(self, note: Notification) -> bool: ...


@dataclass(frozen=True)
class TransitionSeen:
    """Handed to observers (metrics, logs) after a transition is committed."""

    before: RemediationRecord
    after: RemediationRecord
    seconds_in_state: float
    # The transition's own timeline line (`after` may be read without its events).
    action: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)


def _noop(_: TransitionSeen) -> None:
    return None


def _illegal_noop(_: RemediationRecord, __: State) -> None:
    return None


def _always() -> bool:
    return True


def _nothing() -> None:
    return None


def _default_hold() -> timedelta:
    return DEFAULT_MAX_HOLD


def last_progress(record: RemediationRecord) -> str | None:
    """The signature of the last progress line written in the current state."""
    for event in reversed(record.events):
        if event.to_state is not None:
            return None
        if event.action == "progress":
            signature = event.detail.get("signature")
            return str(signature) if signature is not None else None
    return None


class RemediationService:
    def __init__(
        self,
        repository: Repository,
        kube: KubeClient,
        provider: NodePoolProvider,
        clock: Clock,
        *,
        actor: str,
        drainer: Drainer | None = None,
        notifier: Notifier | None = None,
        opt_out_label: str = OPT_OUT_LABEL,
        cluster: str = "",
        on_transition: Callable[[TransitionSeen], None] = _noop,
        on_illegal: Callable[[RemediationRecord, State], None] = _illegal_noop,
        may_act: Callable[[], bool] = _always,
        jobs: JobSettings = DEFAULT_JOBS,
        repair_poll_seconds: float = 2.0,
        slurm: SlurmSteps | None = None,
        pool_label: str = "",
        opt_outs: OptOutBook | None = None,
        max_opt_out_hold: Callable[[], timedelta] = _default_hold,
        provider_kind: Callable[[str | None], str] = lambda _pool: "",
        rma_webhook: RmaWebhook | None = None,
        hardware: HardwareSource | None = None,
        machine_hold: Callable[[str], str | None] = lambda _node: None,
    ) -> None:
        self._repo = repository
        self._opt_outs = opt_outs
        self._max_opt_out_hold = max_opt_out_hold
        self._pool_label = pool_label
        self._kube = kube
        self._provider = provider
        self._clock = clock
        self.actor = actor
        self._notifier = notifier
        self._opt_out_label = opt_out_label
        self._cluster = cluster
        self.on_transition = on_transition
        self._on_illegal = on_illegal
        self._may_act = may_act
        self._slurm = slurm
        self._locks: dict[int, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._due: dict[int, float] = {}
        # Queued remediations found as wanted, at the version looked at: the same version is the
        # same row, so its next poll needs no read (2,000 queued were 1,000 reads a second).
        self._settled: dict[int, int] = {}
        # Holds found not to be looked at again (job_hold.rechecks), at the version looked at.
        self._plain_holds: dict[int, int] = {}
        # Node → the remediation waiting on it: a watch event there ends that wait at once.
        self._waiting_on: dict[str, int] = {}
        self._waiting_guard = threading.Lock()
        self._woken: set[int] = set()
        self.on_wake: Callable[[], None] = _nothing
        self._steps = StepContext(
            repo=repository,
            kube=kube,
            provider=provider,
            clock=clock,
            actor=actor,
            drainer=drainer or Drainer(kube, clock),
            jobs=jobs,
            repair_poll=repair_poll_seconds,
            slurm=slurm,
            provider_kind=provider_kind,
            pool_label=pool_label,
            rma_webhook=rma_webhook,
            hardware=hardware,
            machine_hold=machine_hold,
        )

    @property
    def slurm(self) -> SlurmSteps | None:
        return self._slurm

    @property
    def fences(self) -> Fencer:
        return self._steps.fences

    @fences.setter
    def fences(self, fencer: Fencer) -> None:
        """Every fence a step puts on or lifts goes through the fence owner (fences/)."""
        self._steps.fencer = fencer

    # -- driving -----------------------------------------------------------------------------

    def advance_due(self) -> int:
        """Tick every open remediation whose wait is over; returns how many were ticked."""
        ticked = 0
        now = self._clock.monotonic()
        wall = self._clock.now()
        listed = self._repo.list_open()
        self._settled = {r.id: v for r in listed if (v := self._settled.get(r.id)) is not None}
        self._plain_holds = {
            r.id: v for r in listed if (v := self._plain_holds.get(r.id)) is not None
        }
        for record in listed:
            if not self._may_look(record) or self._due.get(record.id, 0.0) > now:
                continue
            if record.state is State.QUEUED and self._settled.get(record.id) == record.version:
                self._due[record.id] = now + planner.HUMAN_POLL_SECONDS
                continue
            if record.next_attempt_at is not None and record.next_attempt_at > wall:
                # A retry scheduled for later (a provider's Retry-After), kept durably; known
                # as this one's wait so that the next run is set for it, not sooner.
                self._due[record.id] = now + (record.next_attempt_at - wall).total_seconds()
                continue
            if not self._may_act():
                break
            try:
                self.advance(record.id)
            except Exception:
                # One remediation's bug must not starve the others; it is retried later.
                log.exception(
                    "tick failed", extra={"remediation_id": record.id, "node": record.node}
                )
                self._due[record.id] = now + planner.MAX_BACKOFF_SECONDS
            ticked += 1
        return ticked

    def _may_look(self, record: RemediationRecord) -> bool:
        """Not a state that waits for a human, or a hold not yet found plain at this version."""
        if record.state is State.HELD:
            return self._plain_holds.get(record.id) != record.version
        return record.state not in HUMAN_STATES

    def _looks_again(self, record: RemediationRecord) -> bool:
        """A hold looked at every poll (job_hold.rechecks, read from the full timeline); any
        other is remembered as plain until its row moves."""
        if job_hold.rechecks(record):
            return True
        self._plain_holds[record.id] = record.version
        return False

    def next_due_in(self) -> float | None:
        """Seconds until the earliest waiting remediation is due; None when none waits."""
        due = list(self._due.values())
        return max(0.0, min(due) - self._clock.monotonic()) if due else None

    def wake_node(self, node: str) -> None:
        """Something changed on `node` (a pod, the node itself): the remediation waiting on it
        is due now, not at the end of its wait."""
        with self._waiting_guard:
            remediation_id = self._waiting_on.get(node)
            if remediation_id is None:
                return
            # Seen by a tick that is running now only if it looked after this: mark it, so that
            # the tick's own wait ends at once instead of missing the change.
            self._woken.add(remediation_id)
        self._due.pop(remediation_id, None)
        self.on_wake()

    def wake_all(self) -> None:
        """Events may have been missed (a watch resynced): every waiter looks once."""
        if self._due:
            self._due.clear()
            self.on_wake()

    def advance(self, remediation_id: int) -> RemediationRecord | None:
        """Move one remediation as far as it goes now; skipped when another thread has it."""
        lock = self._lock(remediation_id)
        if not lock.acquire(blocking=False):
            return None
        try:
            with self._waiting_guard:
                self._woken.discard(remediation_id)  # this tick looks after that change
            record = self._repo.get(remediation_id)
            for _ in range(MAX_MOVES_PER_TICK):
                if record is None or record.state in (State.SUCCEEDED, State.CANCELLED):
                    self._forget(remediation_id)
                    return record
                if record.state in HUMAN_STATES and not (
                    record.state is State.HELD and self._looks_again(record)
                ):
                    return record
                if not self._may_act():
                    return record
                if record.state is State.QUEUED:
                    self._while_queued(record)
                    return record
                seen = self._observe(record)
                if seen.permanent_error is not None and self._node_gone(record.node):
                    # A step (or a retry) on a node that has left: end it instead of failing
                    # on `get node … 404` for ever (remediation/node_gone.py).
                    self._forget(remediation_id)
                    nodes = self._kube.list_nodes()
                    ended = end_gone(self._repo, record, nodes, self._pool_label, self.actor)
                    return ended or self._repo.get(remediation_id)
                if not self._may_act():
                    # Leadership lapsed during the step: what it saw is not ours to record;
                    # the next leader re-runs the (idempotent) step.
                    return record
                decided = planner.plan(seen)
                if isinstance(decided, Stay):
                    self._stay(record, decided)
                    return record
                moved = self._move(record, decided)
                if moved is None:
                    return self._repo.get(remediation_id)
                record = self._repo.get(remediation_id)
            return record
        finally:
            lock.release()

    def _node_gone(self, node: str) -> bool:
        try:
            self._kube.get_node(node)
        except NotFoundError:
            return True
        except RemediatorError:
            return False  # cannot tell now: the step's own error stands
        return False

    def _lock(self, remediation_id: int) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(remediation_id, threading.Lock())

    def _forget(self, remediation_id: int) -> None:
        self._due.pop(remediation_id, None)
        with self._waiting_guard:
            self._waiting_on = {n: r for n, r in self._waiting_on.items() if r != remediation_id}
            self._woken.discard(remediation_id)
        with self._locks_guard:
            self._locks.pop(remediation_id, None)
        checked = self._steps.capacity_checked
        self._steps.capacity_checked = {k for k in checked if k[0] != remediation_id}

    # -- queued ------------------------------------------------------------------------------

    def _while_queued(self, record: RemediationRecord) -> None:
        """What a queued node gets meanwhile: the quarantine (cordon + taint, nothing evicted)
        when a budget holds it and its policy says `while_queued: cordon`, on every tray of its
        clique or domain (remediation/queued_fence.py); nothing, and our quarantine lifted,
        while the breaker or a pause holds it (the signals are suspect)."""
        self._due[record.id] = self._clock.monotonic() + planner.HUMAN_POLL_SECONDS
        wanted = (
            record.queue_cause == HoldCause.BUDGET.value
            and (record.while_queued or "cordon") == "cordon"
            and not record.dry_run
        )
        done = last_queued_action(record)
        if (done == QUEUED_CORDON) == wanted:
            self._settled[record.id] = record.version
            return  # as wanted already, as far as its own timeline knows
        try:
            if wanted:
                why = Why(str(record.id), record.policy, signal_text(record))
                outcome = fence_unit(self.fences, domain.members(record, self._steps), why)
                action = QUEUED_CORDON
            else:
                outcome = release_unit(self.fences, record)
                action = QUEUED_RELEASE
        except RemediatorError as exc:
            log.warning(
                "queued %s: %s",
                record.node,
                exc,
                extra={"remediation_id": record.id, "node": record.node},
            )
            return
        if isinstance(outcome, Done):
            self._repo.append_event(
                record.id,
                action=action,
                actor=self.actor,
                detail={"result": outcome.detail, **outcome.facts},
            )
            self._settled[record.id] = record.version  # an event moves no version

    # -- observing ---------------------------------------------------------------------------

    def _observe(self, record: RemediationRecord) -> Situation:
        ladder = parse_ladder(record.ladder)
        base = Situation(
            state=record.state,
            ladder=ladder,
            approval_required=record.approval_required,
            dry_run=record.dry_run,
            attempts=record.attempts,
            last_progress=last_progress(record),
            operation_id=record.replacement_operation_id,
            hold_reason=record.hold_reason,
            new_node=record.new_node,
            replacements=replacements(record),
            job_hold=job_hold.rechecks(record),
        )
        try:
            outcome, opt_out = self._act(record, ladder)
        except ApiUnavailable as exc:
            return replace(base, error=str(exc), error_delay=exc.delay, api_unavailable=True)
        except TransientError as exc:
            return replace(base, error=str(exc), error_delay=exc.delay)
        except PermanentError as exc:
            return replace(base, permanent_error=str(exc))
        except RemediatorError as exc:
            return replace(base, error=str(exc))
        return replace(base, outcome=outcome, opt_out=opt_out)

    def _act(
        self, record: RemediationRecord, ladder: tuple[LadderStep, ...]
    ) -> tuple[Outcome | None, Outcome | None]:
        """Run the current state's executor from the step table (idempotent); (outcome, opt-out
        check). The opt-out check follows a done quarantine: the opt-out hold is ours."""
        if record.state is State.HELD_BY_OPT_OUT:
            return None, self._check_opt_out(record)
        if record.state is State.HELD:
            return job_hold.recheck(record, self._steps), None
        executor = STEPS.get(record.state)
        if executor is None:
            return None, None
        step = planner.step_of(ladder, executor.name) or LadderStep(executor.name)
        outcome = executor.run(record, step, self._steps)
        opt_out = None
        if record.state is State.QUARANTINED:
            more = planner.next_work_state(ladder, record.state) is not None
            if isinstance(outcome, Done) and more and not opt_out_released(record):
                opt_out = self._check_opt_out(record)
        return outcome, opt_out

    # -- Slurm (only when `slurm.enabled`; never in a dry run) -------------------------------

    def _slurm_for(self, record: RemediationRecord) -> SlurmSteps | None:
        return None if record.dry_run else self._slurm

    def _check_opt_out(self, record: RemediationRecord) -> Outcome:
        """Labels and recorded opt-outs (node, pods, Slurm jobs); a hold that outlasted
        max_opt_out_hold goes to on-call once."""
        now, book = self._clock.now(), self._opt_outs
        pods = check_opt_out(
            self._kube, record.node, self._opt_out_label, now=now, book=book, actor=self.actor
        )
        slurm = self._slurm_for(record)
        if slurm is not None:
            jobs = None if book is None else recorded_jobs(book, now, self.actor, record.node)
            pods = both(pods, lambda: slurm.opt_out(record, jobs))
        return self._escalate_opt_out(record, pods, now)

    def _escalate_opt_out(
        self, record: RemediationRecord, outcome: Outcome, now: datetime
    ) -> Outcome:
        if record.state is not State.HELD_BY_OPT_OUT or not isinstance(outcome, Held):
            return outcome
        since = entered_at(record, State.HELD_BY_OPT_OUT)
        limit = self._max_opt_out_hold()
        done = next(
            (e for e in record.events if e.action == "opt_out_escalated" and e.at >= since), None
        )
        if done is None and escalation_due(since, now, limit, escalated=False):
            words = f"held by an opt-out longer than max_opt_out_hold ({span(limit)})"
            detail = {"held_since": since.isoformat(), "max_opt_out_hold": span(limit)}
            self._repo.append_event(
                record.id,
                action="opt_out_escalated",
                actor=self.actor,
                detail={**detail, "reason": f"{words}: {outcome.reason}"},
            )
            if self._opt_outs is not None:
                self._opt_outs.audit_escalation(
                    record.id, self.actor, words, f"{record.node}: {outcome.reason}"
                )
            if self._notifier is not None:
                self._notifier.send(
                    Notification(
                        kind=NotificationKind.OPT_OUT_ESCALATED,
                        remediation_id=str(record.id),
                        node=record.node,
                        summary=f"{record.node} {words}: {outcome.reason}",
                        policy=record.policy,
                        cluster=self._cluster,
                        fields={"Held since": since.isoformat(timespec="seconds")},
                    )
                )
            escalated_at = now
        elif done is not None:
            escalated_at = done.at
        else:
            return outcome
        return Held(
            f"escalated to on-call at {escalated_at.isoformat(timespec='seconds')} (held longer "
            f"than max_opt_out_hold {span(limit)}): {outcome.reason}",
            {**outcome.facts, "escalated": True},
        )

    # -- persisting --------------------------------------------------------------------------

    def _stay(self, record: RemediationRecord, stay: Stay) -> None:
        with self._waiting_guard:
            for node in (record.node, record.new_node):
                if node:
                    self._waiting_on[node] = record.id
            changed_meanwhile = record.id in self._woken
        wait = 0.0 if changed_meanwhile else stay.retry_after
        self._due[record.id] = self._clock.monotonic() + wait
        if changed_meanwhile:
            self.on_wake()
        try:
            if stay.note:
                self._repo.append_event(
                    record.id, action=stay.note, actor=self.actor, detail=dict(stay.detail)
                )
            fields = dict(stay.fields)
            if stay.note == "retrying":
                fields["next_attempt_at"] = self._clock.now() + timedelta(seconds=stay.retry_after)
            changed = {k: v for k, v in fields.items() if getattr(record, k) != v}
            if changed:
                self._repo.update_fields(record.id, record.version, **changed)
        except ConflictError:
            self._due.pop(record.id, None)  # moved meanwhile (a console command): look again

    def _disruption(self, record: RemediationRecord) -> dict[str, object]:
        """At the end: which evicted pods a replacement now runs for, one pod list per
        namespace (the one check; see model/disruption.py)."""
        evicted = evictions(e.detail for e in record.events)
        if not evicted:
            return {}
        try:
            pods = [
                p for ns in sorted({e.namespace for e in evicted}) for p in self._kube.list_pods(ns)
            ]
        except RemediatorError as exc:
            log.info(
                "disruption check skipped: %s",
                exc,
                extra={"remediation_id": record.id, "node": record.node},
            )
            return {"disruption_unchecked": str(exc)}
        return {"disrupted": [e.facts() for e in rescheduled(evicted, pods)]}

    def _move(self, record: RemediationRecord, move: Move) -> RemediationRecord | None:
        spent = (self._clock.now() - entered_at(record, record.state)).total_seconds()
        detail = dict(move.detail)
        if move.target in (State.SUCCEEDED, State.FAILED):
            detail.update(self._disruption(record))
        try:
            after = self._repo.transition(
                record.id,
                record.state,
                move.target,
                action=move.action,
                actor=self.actor,
                detail=detail,
                expected_version=record.version,
                **dict(move.fields),
            )
        except ConflictError:
            log.info(
                "remediation changed concurrently; re-reading",
                extra={"remediation_id": record.id, "node": record.node},
            )
            return None
        except IllegalTransition as exc:
            log.error(
                "illegal transition refused: %s",
                exc,
                extra={"remediation_id": record.id, "node": record.node},
            )
            self._on_illegal(record, move.target)
            self._due[record.id] = self._clock.monotonic() + planner.HUMAN_POLL_SECONDS
            return None
        self._due.pop(record.id, None)
        log_transition(
            record.state,
            after,
            action=move.action,
            detail=move.detail,
            seconds_in_state=max(0.0, spent),
            actor=self.actor,
        )
        self.on_transition(TransitionSeen(record, after, max(0.0, spent), move.action, detail))
        self._notify(record, after, move)
        return after

    def _notify(self, before: RemediationRecord, after: RemediationRecord, move: Move) -> None:
        ladder = parse_ladder(after.ladder)
        kind: NotificationKind | None = None
        target = after.state
        if target in (State.HELD, State.HELD_BY_OPT_OUT, State.AWAITING_APPROVAL):
            kind = NotificationKind.HELD
        elif target is State.FAILED:
            kind = NotificationKind.FAILED
        elif planner.notifies(ladder) and before.state is State.DETECTED:
            kind = NotificationKind.STARTED
        elif planner.notifies(ladder) and target is State.SUCCEEDED:
            kind = NotificationKind.SUCCEEDED
        if kind is None or self._notifier is None:
            return
        message = planner.step_of(ladder, "notify")
        summary = after.hold_reason or after.error or after.reason
        if message is not None and message.message:
            summary = f"{summary} — {message.message}"
        fields = {"State": target.value}
        if after.dry_run:
            fields["Dry run"] = "yes"
        self._notifier.send(
            Notification(
                kind=kind,
                remediation_id=str(after.id),
                node=after.node,
                summary=summary,
                policy=after.policy,
                cluster=self._cluster,
                fields=fields,
            )
        )
