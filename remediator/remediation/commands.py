"""The on-call commands: approve, cancel, retry, release, pause, resume, reset the breaker.

A remediation's state is the step being executed, so each command is one compare-and-set
transition through the repository with the person recorded as the actor; the engine picks the
new state up on its next tick. Deciding the target state is pure (`*_target`), so a refusal names
its reason before anything is written. A refusal, or losing a race with the engine, surfaces as
CommandRefused, which the console shows as 409 with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from remediator.errors import ConflictError, IllegalTransition, NotFoundError, RemediatorError
from remediator.model.states import CANCELLABLE, TRANSITIONS, State
from remediator.policy.ladder import parse_ladder
from remediator.remediation import planner
from remediator.remediation.journal import entered_at, log_transition
from remediator.remediation.suppression import DEFAULT_CANCEL_COOLDOWN
from remediator.store.records import ControllerStatus, RemediationFilter, RemediationRecord
from remediator.store.repository import Repository


class CommandRefused(RemediatorError):
    """The remediation's (or the controller's) state does not allow the command right now."""


@dataclass(frozen=True)
class Move:
    """A decided transition: where to go and which bookkeeping fields to clear on the way."""

    target: State
    fields: dict[str, Any]


def approve_target(record: RemediationRecord) -> Move:
    if record.state is not State.AWAITING_APPROVAL:
        raise CommandRefused(
            f"remediation {record.id} is {record.state.value}, not awaiting_approval"
        )
    return Move(State.QUARANTINED, {})


def cancel_target(record: RemediationRecord) -> Move:
    if record.state not in CANCELLABLE:
        raise CommandRefused(f"remediation {record.id} is {record.state.value}: already finished")
    return Move(State.CANCELLED, {})


def kept_fenced(
    record: RemediationRecord, machine_hold: Callable[[str], str | None]
) -> dict[str, str]:
    """The remediation's nodes (its own, and the new one of a replacement) that sit on a
    quarantined machine → the hold's reason: a cancel leaves them fenced (the reconcile does not
    release them while the ledger says quarantined), and says so."""
    nodes = dict.fromkeys(n for n in (record.node, record.new_node) if n)
    return {node: reason for node in nodes if (reason := machine_hold(node)) is not None}


def retry_target(record: RemediationRecord) -> Move:
    """Back into the step that failed: the from_state of the last transition into FAILED."""
    if record.state is not State.FAILED:
        raise CommandRefused(f"remediation {record.id} is {record.state.value}, not failed")
    step = entered_from(record, State.FAILED)
    if step is None or step not in TRANSITIONS[State.FAILED]:
        where = step.value if step else "an unknown state"
        raise CommandRefused(
            f"remediation {record.id} failed in {where}, which cannot be retried; cancel it "
            "and let the policies decide afresh"
        )
    return Move(step, {"error": None, "attempts": 0, "next_attempt_at": None})


def release_target(record: RemediationRecord) -> Move:
    """Held by opt-out: on-call overrides the opt-out and the ladder goes on with the step after
    the quarantine (the checkpoint, when the policy has one), exactly where the engine would
    have gone had the labelled pods left. Held: back into the step that held it."""
    if record.state is State.HELD_BY_OPT_OUT:
        step = planner.next_work_state(parse_ladder(record.ladder), record.state)
        if step is None:
            raise CommandRefused(
                f"remediation {record.id}'s ladder has no step after the quarantine to release "
                "it into; cancel it instead"
            )
        return Move(step, {"hold_reason": None})
    if record.state is State.HELD:
        step = entered_from(record, State.HELD)
        if step is None or step not in TRANSITIONS[State.HELD]:
            where = step.value if step else "an unknown state"
            raise CommandRefused(f"remediation {record.id} was held in {where}; cannot resume it")
        return Move(step, {"hold_reason": None, "attempts": 0, "next_attempt_at": None})
    raise CommandRefused(f"remediation {record.id} is {record.state.value}, not held")


def gone_refusal(record: RemediationRecord) -> str:
    """Why a failed remediation whose node left cannot be retried, and what happens instead (a
    failed one whose node left is kept only when its own replacement took the node)."""
    return (
        f"remediation {record.id}: {record.node} has left the cluster, so there is nothing to "
        f"retry on; it ends as replaced by itself when its pool {record.pool or '(unknown)'} "
        "brings in a node, or cancel it"
    )


def entered_from(record: RemediationRecord, state: State) -> State | None:
    for event in reversed(record.events):
        if event.to_state is state:
            return event.from_state
    return None


COMMANDS: dict[str, tuple[Callable[[RemediationRecord], Move], str]] = {
    "approve": (approve_target, "approved"),
    "cancel": (cancel_target, "cancelled"),
    "retry": (retry_target, "retried"),
    "release": (release_target, "released"),
}


def run(
    repository: Repository,
    command: str,
    remediation_id: int,
    *,
    actor: str,
    reason: str | None = None,
    cooldown: timedelta | None = None,
    machine_hold: Callable[[str], str | None] | None = None,
    node_known: Callable[[str], bool | None] | None = None,
) -> RemediationRecord:
    """Apply one remediation command; NotFoundError when there is no such remediation.

    A cancel sticks: no policy re-remediates the node for the same fault (see
    remediation/suppression.py) within `cooldown` (default an hour; zero lets them at once).
    `machine_hold` (the node → its quarantined machine's hold reason, remediation/machine_hold.py)
    lets a cancel say which of its nodes stay fenced: on the timeline's line and as the answer's
    `hold_reason`. `node_known` (whether the cluster has a node; None: cannot say) refuses a
    retry on a node that has left: nothing is there to retry on."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}")
    if cooldown is not None and command != "cancel":
        raise CommandRefused(f"only cancel takes a cooldown, not {command}")
    decide, action = COMMANDS[command]
    record = repository.get(remediation_id)
    if record is None:
        raise NotFoundError(f"remediation {remediation_id} not found")
    move = decide(record)
    if command == "retry" and node_known is not None and node_known(record.node) is False:
        raise CommandRefused(gone_refusal(record))
    detail: dict[str, Any] = {"command": command}
    if reason:
        detail["reason"] = reason
    if command == "cancel":
        held_off = DEFAULT_CANCEL_COOLDOWN if cooldown is None else cooldown
        until = repository.now() + held_off
        move.fields["suppressed_until"] = until
        detail["cooldown_seconds"] = int(held_off.total_seconds())
        fenced = kept_fenced(record, machine_hold) if machine_hold is not None else {}
        if fenced:
            detail["kept_fenced"] = fenced
            move.fields["hold_reason"] = "; ".join(
                f"{node} stays fenced: {reason}" for node, reason in fenced.items()
            )
    try:
        after = repository.transition(
            remediation_id,
            record.state,
            move.target,
            action=action,
            actor=actor,
            detail=detail,
            expected_version=record.version,
            **move.fields,
        )
    except (ConflictError, IllegalTransition) as exc:
        raise CommandRefused(f"remediation {remediation_id} changed meanwhile: {exc}") from exc
    spent = (after.updated_at - entered_at(record, record.state)).total_seconds()
    log_transition(
        record.state,
        after,
        action=action,
        detail=detail,
        seconds_in_state=max(0.0, spent),
        actor=actor,
    )
    return after


def pause(repository: Repository, *, actor: str, reason: str) -> ControllerStatus:
    """Stop all automation: the engine starts no step while paused (running ones finish)."""
    status = repository.controller_status()
    if status.paused:
        raise CommandRefused(f"automation is already paused (by {status.paused_by})")
    return repository.pause(by=actor, reason=reason)


def resume(repository: Repository, *, actor: str, reason: str) -> ControllerStatus:
    if not repository.controller_status().paused:
        raise CommandRefused("automation is not paused")
    return repository.resume(by=actor, reason=reason)


def reset_breaker(
    repository: Repository, *, actor: str, reason: str, drop_queued: bool = False
) -> ControllerStatus:
    """Reset the storm breaker. The remediations it queued are then admitted in priority order
    under the budgets (never counted as new faults again); with `drop_queued` a human who judges
    the storm's signals bad cancels them instead, each with the default cancel cooldown, so the
    same signals do not queue them again."""
    status = repository.controller_status()
    if not status.breaker_tripped:
        raise CommandRefused("the storm breaker is not tripped")
    if drop_queued:
        queued = repository.list(RemediationFilter(states=frozenset({State.QUEUED})), limit=500)
        for record in queued.rows:
            if record.queue_cause != "breaker":
                continue
            detail = {"command": "reset-breaker", "reason": reason}
            try:
                after = repository.transition(
                    record.id,
                    State.QUEUED,
                    State.CANCELLED,
                    action="dropped",
                    actor=actor,
                    detail=detail,
                    expected_version=record.version,
                    suppressed_until=repository.now() + DEFAULT_CANCEL_COOLDOWN,
                )
            except (ConflictError, IllegalTransition):
                continue  # moved meanwhile: cancelled by someone else, or admitted
            queued_for = (after.updated_at - record.created_at).total_seconds()
            log_transition(
                State.QUEUED,
                after,
                action="dropped",
                detail=detail,
                seconds_in_state=max(0.0, queued_for),
                actor=actor,
            )
    return repository.reset_breaker(by=actor, reason=reason)


CONTROLLER_COMMANDS: dict[str, Callable[..., ControllerStatus]] = {
    "pause": pause,
    "resume": resume,
    "reset-breaker": reset_breaker,
}
