"""What the grace steps read from the timeline: whether on-call released the opt-out hold."""

from __future__ import annotations

from remediator.model.states import State
from remediator.remediation.steps.grace import opt_out_released
from tests.unit.web.builders import event, path, record


def test_only_a_release_of_the_opt_out_hold_overrides_the_opt_out() -> None:
    held = path(State.QUARANTINED, State.HELD_BY_OPT_OUT)
    assert not opt_out_released(record(State.HELD_BY_OPT_OUT, held))
    released = (*held, event(9, 900, State.HELD_BY_OPT_OUT, State.CHECKPOINTING, "released"))
    assert opt_out_released(record(State.CHECKPOINTING, released))
    # The opt-out clearing by itself (the job ended) is no override; nor is releasing a hold.
    cleared = (*held, event(9, 900, State.HELD_BY_OPT_OUT, State.CHECKPOINTING, "opt_out_cleared"))
    assert not opt_out_released(record(State.CHECKPOINTING, cleared))
    other = (
        *path(State.QUARANTINED, State.CHECKPOINTING, State.HELD),
        event(9, 900, State.HELD, State.CHECKPOINTING, "released"),
    )
    assert not opt_out_released(record(State.CHECKPOINTING, other))
