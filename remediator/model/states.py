"""The remediation state machine, as a table checked in one place."""

from __future__ import annotations

from enum import StrEnum

from remediator.errors import IllegalTransition


class State(StrEnum):
    # Decided, but a budget, max_concurrent, a pause or the storm breaker holds it back: durable
    # and visible before any step runs; admitted into DETECTED when the hold lifts.
    QUEUED = "queued"
    DETECTED = "detected"
    AWAITING_APPROVAL = "awaiting_approval"
    QUARANTINED = "quarantined"
    HELD_BY_OPT_OUT = "held_by_opt_out"
    CHECKPOINTING = "checkpointing"
    DRAINING = "draining"
    # Repair before replace: reset the faulty GPU(s), reboot the node, run DCGM diagnostics,
    # and return a node that passed them to service.
    RESETTING_GPU = "resetting_gpu"
    REBOOTING = "rebooting"
    DIAGNOSING = "diagnosing"
    UNCORDONING = "uncordoning"
    # Owned hardware at fault goes back to its vendor: open an RMA case with the evidence
    # (remediator/rma/), then the ladder goes on (a replacement) or the node stays fenced.
    OPENING_RMA = "opening_rma"
    REPLACING = "replacing"
    # Burn-in before a node takes work: a new machine (after REPLACING) or a repaired one
    # (before UNCORDONING) runs its checks fenced; a failure replaces it (again) or escalates.
    VALIDATING = "validating"
    VERIFYING = "verifying"
    HELD = "held"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


_WORK = frozenset(
    {
        State.QUARANTINED,
        State.CHECKPOINTING,
        State.DRAINING,
        State.RESETTING_GPU,
        State.REBOOTING,
        State.DIAGNOSING,
        State.UNCORDONING,
        State.OPENING_RMA,
        State.REPLACING,
        State.VALIDATING,
        State.VERIFYING,
    }
)
# A repair that fails may escalate to a replacement (`on_failure: replace`) or to another
# repair, the first step of a named fallback ladder (`on_failure: <policy>`).
_REPAIR = frozenset({State.RESETTING_GPU, State.REBOOTING, State.DIAGNOSING})
_REPAIR_END = frozenset(
    {State.OPENING_RMA, State.REPLACING, State.HELD, State.FAILED, State.VALIDATING}
)

TRANSITIONS: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.DETECTED}),
    State.DETECTED: frozenset(
        {State.AWAITING_APPROVAL, State.QUARANTINED, State.SUCCEEDED, State.FAILED}
    ),
    State.AWAITING_APPROVAL: frozenset({State.QUARANTINED, State.SUCCEEDED}),
    State.QUARANTINED: frozenset(
        {
            State.HELD_BY_OPT_OUT,
            State.CHECKPOINTING,
            State.DRAINING,
            State.OPENING_RMA,
            State.REPLACING,
            # A machine that joined by itself with the startup taint: nothing ran on it to drain.
            State.VALIDATING,
            State.SUCCEEDED,
            State.HELD,
            State.FAILED,
        }
    ),
    State.HELD_BY_OPT_OUT: frozenset(
        {
            State.CHECKPOINTING,
            State.DRAINING,
            State.OPENING_RMA,
            State.REPLACING,
            State.VALIDATING,
            State.SUCCEEDED,
        }
    ),
    State.CHECKPOINTING: frozenset(
        {State.HELD_BY_OPT_OUT, State.DRAINING, State.SUCCEEDED, State.HELD, State.FAILED}
    ),
    State.DRAINING: frozenset(
        {
            State.HELD_BY_OPT_OUT,
            State.RESETTING_GPU,
            State.REBOOTING,
            State.DIAGNOSING,
            State.OPENING_RMA,
            State.REPLACING,
            State.SUCCEEDED,
            State.HELD,
            State.FAILED,
        }
    ),
    State.RESETTING_GPU: frozenset(
        _REPAIR_END | _REPAIR - {State.RESETTING_GPU} | {State.SUCCEEDED}
    ),
    State.REBOOTING: frozenset(_REPAIR_END | _REPAIR - {State.REBOOTING} | {State.SUCCEEDED}),
    State.DIAGNOSING: frozenset(
        _REPAIR_END | _REPAIR - {State.DIAGNOSING} | {State.UNCORDONING, State.SUCCEEDED}
    ),
    # Passed: the new machine is verified, the repaired node uncordoned. Failed: a new machine
    # is replaced again (or held at max_replacements), a repaired one goes to its fallback.
    State.VALIDATING: frozenset(
        _REPAIR_END - {State.VALIDATING}
        | _REPAIR
        | {State.VERIFYING, State.UNCORDONING, State.SUCCEEDED}
    ),
    State.UNCORDONING: frozenset({State.SUCCEEDED, State.HELD, State.FAILED}),
    # The case is open: a replacement follows, or the fenced node waits for a human.
    State.OPENING_RMA: frozenset({State.REPLACING, State.SUCCEEDED, State.HELD, State.FAILED}),
    State.REPLACING: frozenset({State.VALIDATING, State.VERIFYING, State.HELD, State.FAILED}),
    State.VERIFYING: frozenset({State.SUCCEEDED, State.FAILED}),
    State.HELD: frozenset(_WORK | {State.SUCCEEDED, State.FAILED}),
    # Or straight to succeeded: the node left and its pool replaced it by itself (an Auto
    # Scaling group whose capacity came back), so there is nothing left to retry.
    State.FAILED: _WORK | {State.SUCCEEDED},
    State.SUCCEEDED: frozenset(),
    State.CANCELLED: frozenset(),
}

TERMINAL = frozenset({State.SUCCEEDED, State.CANCELLED})
OPEN = frozenset(s for s in State if s not in TERMINAL and s is not State.FAILED)
CANCELLABLE = frozenset(OPEN | {State.FAILED})
WAITING_FOR_HUMAN = frozenset({State.AWAITING_APPROVAL, State.HELD_BY_OPT_OUT, State.HELD})


def check_transition(current: State, target: State) -> None:
    """Raise IllegalTransition unless the table allows current → target (cancel is always open)."""
    if target is State.CANCELLED and current in CANCELLABLE:
        return
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"{current.value} → {target.value} is not allowed")


# The state each ladder step works in (taint shares the cordon's): the planner walks a ladder
# through them, and the shadow report replays what a dry run would have walked.
STEP_STATES: dict[str, State] = {
    "cordon": State.QUARANTINED,
    "taint": State.QUARANTINED,
    "checkpoint": State.CHECKPOINTING,
    "drain": State.DRAINING,
    "reset_gpu": State.RESETTING_GPU,
    "reboot": State.REBOOTING,
    "diagnose": State.DIAGNOSING,
    "uncordon": State.UNCORDONING,
    "rma": State.OPENING_RMA,
    "replace": State.REPLACING,
    "validate": State.VALIDATING,
}
