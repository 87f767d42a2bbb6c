"""A human's command shows as pending until the owning cluster's controller acts on it, with the
controller's silence named when it has not been seen lately (pure: record, last seen, now)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from remediator.model.states import State
from remediator.web.pending import pending_command
from tests.unit.web.builders import T0, event, record

APPROVED = replace(
    event(2, 60, State.AWAITING_APPROVAL, State.QUARANTINED, "approved", {"command": "approve"}),
    actor="ana (operator token 1a2b3c)",
)
WAITING = (event(1, 0, None, State.AWAITING_APPROVAL), APPROVED)


def seen(at: datetime | None) -> Callable[[], datetime | None]:
    return lambda: at


def test_a_command_with_no_controller_step_after_it_is_pending() -> None:
    now = T0 + timedelta(seconds=75)
    found = pending_command(
        record(State.QUARANTINED, WAITING), seen(T0 + timedelta(seconds=70)), now
    )
    assert found is not None
    assert (found.command, found.asked_by, found.asked_at) == (
        "approve",
        "ana (operator token 1a2b3c)",
        APPROVED.at,
    )
    assert found.waiting_seconds == 15.0
    assert found.controller_problem is None


def test_a_silent_controller_is_named() -> None:
    now = T0 + timedelta(seconds=200)
    found = pending_command(
        record(State.QUARANTINED, WAITING), seen(T0 + timedelta(seconds=50)), now
    )
    assert found is not None
    assert found.controller_problem == (
        "controller of cluster c not seen for 150 s: commands wait until it returns"
    )
    never = pending_command(record(State.QUARANTINED, WAITING), seen(None), now)
    assert never is not None
    assert never.controller_problem == (
        "controller of cluster c never seen: commands wait until it runs"
    )


def test_the_controllers_next_step_ends_it() -> None:
    drained = replace(event(3, 90, State.QUARANTINED, State.DRAINING), actor="controller c-0")
    done = record(State.DRAINING, (*WAITING, drained))
    assert pending_command(done, seen(T0 + timedelta(seconds=95)), T0) is None


def test_a_cancel_is_pending_until_the_controller_has_run_since() -> None:
    cancelled = replace(
        event(2, 60, State.DRAINING, State.CANCELLED, "cancelled", {"command": "cancel"}),
        actor="bo",
    )
    gone = record(State.CANCELLED, (event(1, 0, None, State.DRAINING), cancelled))
    now = T0 + timedelta(seconds=65)
    assert pending_command(gone, seen(T0 + timedelta(seconds=55)), now) is not None
    assert pending_command(gone, seen(T0 + timedelta(seconds=62)), now) is None


def test_steps_of_the_controller_alone_are_never_pending() -> None:
    plain = record(State.QUARANTINED, (event(1, 0, None, State.DETECTED),))
    assert pending_command(plain, seen(None), T0) is None
