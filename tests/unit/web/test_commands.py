"""The on-call commands' decisions: which state each one leads to, and when it refuses."""

from __future__ import annotations

import pytest

from remediator.model.states import CANCELLABLE, State, check_transition
from remediator.remediation import commands
from tests.unit.web.builders import event, path, record


def test_approve_only_from_awaiting_approval() -> None:
    move = commands.approve_target(record(State.AWAITING_APPROVAL))
    assert move.target is State.QUARANTINED
    with pytest.raises(commands.CommandRefused, match="not awaiting_approval"):
        commands.approve_target(record(State.DRAINING))


@pytest.mark.parametrize("state", list(State))
def test_cancel_from_every_cancellable_state(state: State) -> None:
    if state in CANCELLABLE:
        assert commands.cancel_target(record(state)).target is State.CANCELLED
        check_transition(state, State.CANCELLED)
    else:
        with pytest.raises(commands.CommandRefused, match="already finished"):
            commands.cancel_target(record(state))


@pytest.mark.parametrize(
    "failed_in", [State.QUARANTINED, State.CHECKPOINTING, State.DRAINING, State.REPLACING]
)
def test_retry_returns_to_the_step_that_failed(failed_in: State) -> None:
    events = (*path(State.QUARANTINED), event(9, 500, failed_in, State.FAILED))
    move = commands.retry_target(record(State.FAILED, events, error="boom", attempts=4))
    assert move.target is failed_in
    assert move.fields == {"error": None, "attempts": 0, "next_attempt_at": None}
    check_transition(State.FAILED, move.target)


def test_retry_uses_the_last_failure() -> None:
    events = (
        *path(State.QUARANTINED, State.DRAINING, State.FAILED, State.DRAINING),
        event(20, 900, State.DRAINING, State.REPLACING),
        event(21, 950, State.REPLACING, State.FAILED),
    )
    assert commands.retry_target(record(State.FAILED, events)).target is State.REPLACING


def test_retry_refuses_what_cannot_be_re_entered() -> None:
    with pytest.raises(commands.CommandRefused, match="not failed"):
        commands.retry_target(record(State.DRAINING))
    detected_failed = record(State.FAILED, path(State.FAILED))
    with pytest.raises(commands.CommandRefused, match="failed in detected"):
        commands.retry_target(detected_failed)
    with pytest.raises(commands.CommandRefused, match="unknown state"):
        commands.retry_target(record(State.FAILED))


LADDER = (
    {"action": "cordon"},
    {"action": "checkpoint"},
    {"action": "drain"},
    {"action": "replace"},
)


def test_release_overrides_opt_out_and_resumes_held() -> None:
    opt_out = commands.release_target(
        record(State.HELD_BY_OPT_OUT, hold_reason="label", ladder=LADDER)
    )
    assert opt_out.target is State.CHECKPOINTING
    assert opt_out.fields == {"hold_reason": None}
    held = record(State.HELD, path(State.QUARANTINED, State.DRAINING, State.HELD))
    assert commands.release_target(held).target is State.DRAINING
    with pytest.raises(commands.CommandRefused, match="not held"):
        commands.release_target(record(State.VERIFYING))
    with pytest.raises(commands.CommandRefused, match="cannot resume"):
        commands.release_target(record(State.HELD))


def test_release_of_an_opt_out_hold_follows_the_ladder() -> None:
    """No checkpoint in the ladder: straight on to the drain, never into a step the policy
    does not have (which would end the ladder there and hold the node)."""
    no_checkpoint = tuple(step for step in LADDER if step["action"] != "checkpoint")
    move = commands.release_target(record(State.HELD_BY_OPT_OUT, ladder=no_checkpoint))
    assert move.target is State.DRAINING
    check_transition(State.HELD_BY_OPT_OUT, move.target)
    replace_only = ({"action": "cordon"}, {"action": "replace"})
    assert commands.release_target(record(State.HELD_BY_OPT_OUT, ladder=replace_only)).target is (
        State.REPLACING
    )
    with pytest.raises(commands.CommandRefused, match="no step after the quarantine"):
        commands.release_target(record(State.HELD_BY_OPT_OUT, ladder=({"action": "cordon"},)))


def test_unknown_command_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown command"):
        commands.run(None, "reboot", 1, actor="x")  # type: ignore[arg-type]
