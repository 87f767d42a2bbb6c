"""The pure heart of the engine: a remediation, where it stands and what its step's action just
reported → the next transition, or how long to wait.

A remediation's state is the step being executed. The policy's ladder (stored on the remediation
when it was opened, so a policy edit never changes a running remediation) decides which work
states it passes through; every disruptive ladder starts with the quarantine, because draining a
node that still takes new pods is a race, and a replacement is always followed by verification.
A ladder that stops before `replace` ends in HELD: the node is fenced and a human decides (a dry
run, which fenced nothing, ends in SUCCEEDED instead).

Nothing here does I/O or reads a clock: the service passes what it observed and carries out the
answer, persisting a Move before the next step's side effect.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from remediator.actions.outcome import Done, Failed, Held, Outcome, Waiting
from remediator.model.states import STEP_STATES, TRANSITIONS, State
from remediator.policy.ladder import LadderStep

# How long a remediation waiting for a human (or for an opt-out pod to leave) sleeps between
# looks: the console's commands are picked up within this.
HUMAN_POLL_SECONDS = 2.0
OPT_OUT_POLL_SECONDS = 2.0
# Consecutive transient errors in one step before it is held for a human.
MAX_TRANSIENT_ATTEMPTS = 30
MAX_BACKOFF_SECONDS = 30.0
# While the Kubernetes API is unavailable a step waits for it (no give-up: nothing can be done
# without it, and holding would page on-call for the apiserver's outage): backoff up to this,
# or longer when the server's Retry-After says so.
API_BACKOFF_SECONDS = 8.0

# The timeline and metric name of the work done in each work state.
STEP_NAMES: dict[State, str] = {
    State.QUARANTINED: "quarantine",
    State.CHECKPOINTING: "checkpoint",
    State.DRAINING: "drain",
    State.RESETTING_GPU: "reset_gpu",
    State.REBOOTING: "reboot",
    State.DIAGNOSING: "diagnose",
    State.UNCORDONING: "uncordon",
    State.OPENING_RMA: "rma",
    State.REPLACING: "replace",
    State.VALIDATING: "validate",
    State.VERIFYING: "verify",
}
# Repairs whose failure goes to the ladder's fallback (`on_failure: replace`) when it has one
# (a validation of a repaired node too; one of a new machine replaces it again instead).
REPAIR_STATES = frozenset(
    {State.RESETTING_GPU, State.REBOOTING, State.DIAGNOSING, State.VALIDATING}
)
DEFAULT_MAX_REPLACEMENTS = 2
# The engine's own return from a hold whose validation Job the node could not run, once it runs
# (steps/job_hold.py): the same validation goes on, no new round.
VALIDATION_JOB_RUNS = "validation_job_runs"
REPAIRED = "repaired"
REPLACED = "replaced"


def work_states(ladder: Sequence[LadderStep]) -> tuple[State, ...]:
    """The work states a ladder passes through, in order (a fallback only on a failed repair)."""
    states = [STEP_STATES[s.action] for s in ladder if s.action in STEP_STATES and not s.fallback]
    if not states:
        return ()
    ordered: list[State] = [State.QUARANTINED]
    for state in states:
        if state not in ordered:
            ordered.append(state)
    if State.REPLACING in ordered:
        ordered.append(State.VERIFYING)
    return tuple(ordered)


def validates(ladder: Sequence[LadderStep]) -> bool:
    return step_of(ladder, "validate") is not None


def max_replacements(ladder: Sequence[LadderStep]) -> int:
    step = step_of(ladder, "validate")
    raw = (step.checks or {}).get("max_replacements") if step is not None else None
    return DEFAULT_MAX_REPLACEMENTS if raw is None else int(raw)


def next_work_state(ladder: Sequence[LadderStep], after: State) -> State | None:
    """The work state after `after` (the quarantine, for an opt-out hold); None at the end."""
    states = work_states(ladder)
    anchor = State.QUARANTINED if after is State.HELD_BY_OPT_OUT else after
    if anchor not in states:
        return None
    index = states.index(anchor) + 1
    return states[index] if index < len(states) else None


def step_of(ladder: Sequence[LadderStep], action: str) -> LadderStep | None:
    return next((s for s in ladder if s.action == action and not s.fallback), None)


def _stage(step: LadderStep) -> int:
    if not step.fallback:
        return 0
    return step.stage or 1


def escalates(ladder: Sequence[LadderStep]) -> bool:
    """A failed repair goes on to a fallback (a replacement or a named ladder) instead of ending
    failed."""
    return any(_stage(s) == 1 for s in ladder)


def escalation_name(ladder: Sequence[LadderStep]) -> str:
    """What a failed repair escalates to: "replace" or the named ladder's policy."""
    first = [s for s in ladder if _stage(s) == 1]
    return next((s.ladder for s in first if s.ladder), "replace")


def escalated(ladder: Sequence[LadderStep]) -> tuple[LadderStep, ...]:
    """The ladder once a repair failed: the first fallback's steps are the ladder now, the
    fallbacks after it move up one stage."""
    out: list[LadderStep] = []
    for step in ladder:
        stage = _stage(step)
        if stage == 1:
            out.append(replace(step, fallback=None, stage=None, ladder=None))
        elif stage > 1:
            out.append(replace(step, stage=stage - 1))
    return tuple(out)


def notifies(ladder: Sequence[LadderStep]) -> bool:
    return any(s.action == "notify" for s in ladder)


@dataclass(frozen=True)
class Situation:
    """What the service saw this tick. `outcome` is the state's action result (None when the
    state has no action); `opt_out` the opt-out check, when one was made; `error` the message of
    a transient error the action raised instead of answering."""

    state: State
    ladder: tuple[LadderStep, ...]
    approval_required: bool = False
    dry_run: bool = False
    outcome: Outcome | None = None
    opt_out: Outcome | None = None
    error: str | None = None
    error_delay: float = 5.0
    permanent_error: str | None = None
    api_unavailable: bool = False
    attempts: int = 0
    last_progress: str | None = None
    operation_id: str | None = None
    hold_reason: str | None = None
    # The machine a replacement brought (validated in place of the old node), and how many
    # replacements this remediation has had.
    new_node: str | None = None
    replacements: int = 0
    # A hold the engine looks at again (steps/job_hold.py): `outcome` is that look.
    job_hold: bool = False


@dataclass(frozen=True)
class Move:
    """Persist `target` (with the timeline line `action`/`detail` and the bookkeeping `fields`)
    before anything else happens."""

    target: State
    action: str
    detail: Mapping[str, Any] = field(default_factory=dict)
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stay:
    """Wait `retry_after` seconds; write `fields` when given, and a timeline line when `note`."""

    retry_after: float
    reason: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    note: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


Plan = Move | Stay


def plan(s: Situation) -> Plan:
    if s.permanent_error is not None and s.state in STEP_NAMES:
        return _fail(s, s.permanent_error)
    if s.state is State.HELD and s.job_hold:
        return _held_job(s)
    if s.error is not None:
        return _transient(s)
    if s.state is State.DETECTED:
        return _detected(s)
    if s.state is State.QUEUED:
        return Stay(HUMAN_POLL_SECONDS, "queued: the intake admits it when its hold lifts")
    if s.state in (State.AWAITING_APPROVAL, State.HELD, State.FAILED):
        return Stay(HUMAN_POLL_SECONDS, f"{s.state.value}: waiting for a human")
    if s.state in (State.SUCCEEDED, State.CANCELLED):
        return Stay(HUMAN_POLL_SECONDS, f"{s.state.value}: finished")
    if s.state is State.HELD_BY_OPT_OUT:
        return _held_by_opt_out(s)
    return _work(s)


def _detected(s: Situation) -> Plan:
    states = work_states(s.ladder)
    if not states:
        return Move(State.SUCCEEDED, "notified", {"ladder": "notify only"})
    if s.approval_required:
        return Move(State.AWAITING_APPROVAL, "approval_requested")
    return Move(State.QUARANTINED, "started", {"ladder": [st.value for st in states]})


def _held_job(s: Situation) -> Plan:
    """A hold the engine looks at again (steps/job_hold.py: a validation Job the node could not
    run): back to validating once it runs, its reason kept current while it cannot. A look that
    failed changes nothing: the hold stands as it was, to be looked at again."""
    outcome = s.outcome
    if isinstance(outcome, Done):
        detail = {"result": outcome.detail, **_facts(outcome)}
        return Move(State.VALIDATING, VALIDATION_JOB_RUNS, detail, {"hold_reason": None})
    if isinstance(outcome, Held) and outcome.reason != s.hold_reason:
        detail = {"reason": outcome.reason, **_facts(outcome)}
        fields = {"hold_reason": outcome.reason}
        return Stay(HUMAN_POLL_SECONDS, outcome.reason, fields, "hold_reason_changed", detail)
    return Stay(HUMAN_POLL_SECONDS, s.hold_reason or s.error or "held")


def _held_by_opt_out(s: Situation) -> Plan:
    if isinstance(s.opt_out, Done):
        target = next_work_state(s.ladder, State.HELD_BY_OPT_OUT)
        if target is None:  # cannot happen: a hold is only entered with a step to go to
            return Stay(HUMAN_POLL_SECONDS, "nothing left to do after the opt-out")
        return Move(target, "opt_out_cleared", _facts(s.opt_out), {"hold_reason": None})
    if isinstance(s.opt_out, Held):
        return Stay(OPT_OUT_POLL_SECONDS, s.opt_out.reason, {"hold_reason": s.opt_out.reason})
    return Stay(OPT_OUT_POLL_SECONDS, "opt-out not checked")


def _work(s: Situation) -> Plan:
    outcome = s.outcome
    step = STEP_NAMES[s.state]
    if outcome is None:
        return Stay(OPT_OUT_POLL_SECONDS, f"{step}: no outcome")
    if isinstance(outcome, Waiting):
        return _waiting(s, outcome)
    if isinstance(outcome, Held):
        return _hold(s, outcome.reason, outcome.facts)
    if isinstance(outcome, Failed):
        return _fail(s, outcome.reason, outcome.facts)
    return _done(s, outcome)


def _done(s: Situation, outcome: Done) -> Plan:
    step = STEP_NAMES[s.state]
    detail: dict[str, Any] = {"result": outcome.detail, **_facts(outcome)}
    fields: dict[str, Any] = {"attempts": 0, "error": None, "next_attempt_at": None}
    if s.hold_reason:
        fields["hold_reason"] = None
    if s.state is State.REPLACING:
        new_node = outcome.facts.get("new_node")
        fields["new_node"] = new_node
        if outcome.facts.get("operation_id"):
            fields["replacement_operation_id"] = outcome.facts["operation_id"]
    if s.state is State.VERIFYING:
        fields["outcome"] = None if s.dry_run else REPLACED
        return Move(State.SUCCEEDED, f"{step}_done", detail, fields)
    if s.state is State.REPLACING:
        after = State.VALIDATING if validates(s.ladder) else State.VERIFYING
        return Move(after, f"{step}_done", detail, fields)
    if s.state is State.VALIDATING and s.new_node:
        return Move(State.VERIFYING, f"{step}_done", detail, fields)
    if s.state is State.UNCORDONING:
        fields["outcome"] = None if s.dry_run else REPAIRED
        return Move(State.SUCCEEDED, f"{step}_done", detail, fields)
    target = next_work_state(s.ladder, s.state)
    if target is None:
        reason = f"the policy's ladder ends after {step}: the node stays fenced for a human"
        if s.dry_run:
            # Nothing was fenced: holding would page on-call for nothing and keep the node
            # "under remediation", so no live policy could act on it until someone cancelled.
            detail["dry_run_would_hold"] = reason
            return Move(State.SUCCEEDED, f"{step}_done", detail, fields)
        return Move(State.HELD, f"{step}_done", detail, {**fields, "hold_reason": reason})
    if s.state is State.QUARANTINED and isinstance(s.opt_out, Held):
        if s.dry_run:
            detail["dry_run_would_hold"] = s.opt_out.reason
        else:
            detail.update(_facts(s.opt_out))
            return Move(
                State.HELD_BY_OPT_OUT, "held_by_opt_out", detail, {"hold_reason": s.opt_out.reason}
            )
    return Move(target, f"{step}_done", detail, fields)


def _waiting(s: Situation, outcome: Waiting) -> Plan:
    fields: dict[str, Any] = {}
    operation = outcome.facts.get("operation_id")
    if s.state is State.REPLACING and operation and operation != s.operation_id:
        # Known from now on: a restart follows this operation instead of asking again.
        fields["replacement_operation_id"] = operation
    if s.attempts or fields:
        fields["attempts"] = 0
        fields["error"] = None
    # A wait on something unreachable (slurmctld) is a hold while it lasts: its reason shows.
    hold = outcome.reason if outcome.facts.get("holding") else None
    if hold != s.hold_reason:
        fields["hold_reason"] = hold
    signature = progress_signature(outcome.reason, outcome.facts)
    note = "progress" if signature != s.last_progress else None
    detail = {"reason": outcome.reason, **_facts(outcome), "signature": signature}
    return Stay(outcome.retry_after, outcome.reason, fields, note, detail if note else {})


def _api_unavailable(s: Situation) -> Plan:
    """A progress line (once per distinct trouble), not a failure: the step resumes by itself."""
    attempts = s.attempts + 1
    reason = f"Kubernetes API unavailable: {s.error}, retrying"
    delay = max(s.error_delay, min(API_BACKOFF_SECONDS, 0.5 * 2 ** min(attempts, 6)))
    signature = progress_signature(reason, {})
    note = "progress" if signature != s.last_progress else None
    detail = {"reason": reason, "api_unavailable": True, "signature": signature}
    return Stay(delay, reason, {"attempts": attempts}, note, detail if note else {})


def _transient(s: Situation) -> Plan:
    if s.api_unavailable:
        return _api_unavailable(s)
    attempts = s.attempts + 1
    error = s.error or "transient error"
    if attempts >= MAX_TRANSIENT_ATTEMPTS and s.state in STEP_NAMES:
        reason = f"gave up after {attempts} attempts: {error}"
        return _hold(s, reason, {})
    # Our own backoff is capped; a delay the other side asked for (Retry-After) is honoured
    # however long.
    delay = max(s.error_delay, min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** min(attempts, 6)))
    fields = {"attempts": attempts, "error": error}
    return Stay(delay, error, fields, "retrying", {"error": error, "attempt": attempts})


def _hold(s: Situation, reason: str, facts: Mapping[str, Any]) -> Plan:
    if State.HELD not in TRANSITIONS[s.state]:
        return _fail(s, reason, facts)
    detail = {"reason": reason, **facts}
    return Move(State.HELD, f"{STEP_NAMES[s.state]}_held", detail, {"hold_reason": reason})


def _fail(s: Situation, reason: str, facts: Mapping[str, Any] | None = None) -> Plan:
    detail = {"reason": reason, **(facts or {})}
    fields: dict[str, Any] = {"error": reason, "attempts": 0}
    action = f"{STEP_NAMES.get(s.state, s.state.value)}_failed"
    if s.state is State.VALIDATING and s.new_node:
        return _new_machine_failed(s, action, detail)
    if s.state in REPAIR_STATES and escalates(s.ladder):
        # The repair did not take: the node is drained already, so go on with the fallback.
        detail["escalated_to"] = escalation_name(s.ladder)
        if detail["escalated_to"] == "replace":
            return Move(State.REPLACING, action, detail, {"attempts": 0, "error": None})
        # A named ladder: it becomes the remediation's ladder, in the same write as the move.
        after = escalated(s.ladder)
        ladder = [step.to_json() for step in after]
        detail["ladder"] = [step.action for step in after if not step.fallback]
        target = work_states(after)[1]
        return Move(target, action, detail, {"attempts": 0, "error": None, "ladder": ladder})
    if s.state is State.REPLACING:
        # A retry must ask for a new operation: this one is finished for good.
        fields["replacement_operation_id"] = None
        action = "replacement_failed"
    return Move(State.FAILED, action, detail, fields)


def _new_machine_failed(s: Situation, action: str, detail: dict[str, Any]) -> Plan:
    """A replacement that fails its burn-in is replaced in turn, up to max_replacements per
    remediation; then a human gets it, fenced, with the evidence."""
    limit = max_replacements(s.ladder)
    detail["replacements"] = s.replacements
    detail["max_replacements"] = limit
    if s.replacements < limit:
        detail["replaced_again"] = s.new_node
        fields = {"attempts": 0, "error": None, "replacement_operation_id": None}
        return Move(State.REPLACING, action, detail, fields)
    reason = (
        f"replacement {s.new_node} failed validation after {s.replacements} replacement(s) "
        f"(max_replacements {limit}): {detail['reason']}"
    )
    return Move(State.HELD, action, detail, {"hold_reason": reason, "attempts": 0})


def _facts(outcome: Outcome) -> dict[str, Any]:
    return dict(outcome.facts)


def progress_signature(reason: str, facts: Mapping[str, Any]) -> str:
    """What makes two progress reports the same: time-varying counters left out, so a drain
    that is merely still waiting does not write a timeline line every round."""
    stable = {k: v for k, v in facts.items() if k not in ("elapsed_seconds",)}
    text = json.dumps([reason, stable], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
