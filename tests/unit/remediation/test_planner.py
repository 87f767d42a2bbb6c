"""The pure planner: every state's answer to every kind of outcome, and the ladder arithmetic."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediator.actions.outcome import Done, Failed, Held, Waiting
from remediator.model.states import TRANSITIONS, State
from remediator.policy.ladder import LadderStep, ladder_from_policy, parse_ladder
from remediator.policy.schema import Checkpoint, Cordon, Drain, Notify, Replace, Taint
from remediator.remediation import planner
from remediator.remediation.planner import Move, Situation, Stay, next_work_state, plan, work_states

FULL = ladder_from_policy(
    [
        Notify(action="notify", message="paging"),
        Cordon(action="cordon"),
        Checkpoint(action="checkpoint", grace=timedelta(seconds=30)),
        Drain(action="drain", grace=timedelta(seconds=5), timeout=timedelta(minutes=2)),
        Replace(action="replace"),
    ]
)
CORDON_ONLY = (LadderStep("notify"), LadderStep("cordon"))
DRAIN_NO_REPLACE = (LadderStep("cordon"), LadderStep("drain"))
NOTIFY_ONLY = (LadderStep("notify", message="look at the job"),)


def at(state: State, ladder: tuple[LadderStep, ...] = FULL, **kw: object) -> Situation:
    return Situation(state=state, ladder=ladder, **kw)  # type: ignore[arg-type]


def test_ladder_round_trips_through_json() -> None:
    raw = [step.to_json() for step in FULL]
    assert raw[2] == {"action": "checkpoint", "grace_seconds": 30.0, "min_grace_seconds": 30.0}
    assert raw[3]["on_timeout"] == "hold" and raw[3]["timeout_seconds"] == 120.0
    assert parse_ladder(raw) == FULL


def test_work_states_follow_the_ladder() -> None:
    assert work_states(FULL) == (
        State.QUARANTINED,
        State.CHECKPOINTING,
        State.DRAINING,
        State.REPLACING,
        State.VERIFYING,
    )
    assert work_states(NOTIFY_ONLY) == ()
    # A taint still fences the node first; a drain without cordon is quarantined anyway.
    assert work_states((LadderStep("taint"),)) == (State.QUARANTINED,)
    assert work_states((LadderStep("drain"), LadderStep("replace"))) == (
        State.QUARANTINED,
        State.DRAINING,
        State.REPLACING,
        State.VERIFYING,
    )
    assert next_work_state(FULL, State.HELD_BY_OPT_OUT) is State.CHECKPOINTING
    assert next_work_state(DRAIN_NO_REPLACE, State.DRAINING) is None
    assert next_work_state(CORDON_ONLY, State.CHECKPOINTING) is None
    assert ladder_from_policy([Taint(action="taint")]) == (LadderStep("taint"),)


def test_detected_goes_to_approval_quarantine_or_straight_to_success() -> None:
    assert plan(at(State.DETECTED)) == Move(
        State.QUARANTINED,
        "started",
        {"ladder": ["quarantined", "checkpointing", "draining", "replacing", "verifying"]},
    )
    waiting = plan(at(State.DETECTED, approval_required=True))
    assert isinstance(waiting, Move) and waiting.target is State.AWAITING_APPROVAL
    notify = plan(at(State.DETECTED, NOTIFY_ONLY, approval_required=True))
    assert isinstance(notify, Move) and notify.target is State.SUCCEEDED


@pytest.mark.parametrize("state", [State.AWAITING_APPROVAL, State.HELD, State.FAILED])
def test_human_states_wait(state: State) -> None:
    assert isinstance(plan(at(state, outcome=Done("x"))), Stay)


def test_quarantine_done_moves_on_or_holds_for_the_opt_out() -> None:
    done = Done("quarantined", {"node": "n1"})
    onward = plan(at(State.QUARANTINED, outcome=done, opt_out=Done("no opt-out")))
    assert isinstance(onward, Move) and onward.target is State.CHECKPOINTING
    assert onward.action == "quarantine_done" and onward.detail["node"] == "n1"

    holder = Held("1 pod(s) on n1 carry the label", {"pods": ["eval/x"]})
    held = plan(at(State.QUARANTINED, outcome=done, opt_out=holder))
    assert isinstance(held, Move) and held.target is State.HELD_BY_OPT_OUT
    assert held.fields["hold_reason"] == holder.reason and held.detail["pods"] == ["eval/x"]

    dry = plan(at(State.QUARANTINED, outcome=done, opt_out=holder, dry_run=True))
    assert isinstance(dry, Move) and dry.target is State.CHECKPOINTING
    assert dry.detail["dry_run_would_hold"] == holder.reason


def test_a_ladder_that_stops_early_ends_held_for_a_human() -> None:
    cordoned = plan(at(State.QUARANTINED, CORDON_ONLY, outcome=Done("quarantined")))
    assert isinstance(cordoned, Move) and cordoned.target is State.HELD
    assert "ends after quarantine" in cordoned.fields["hold_reason"]
    drained = plan(at(State.DRAINING, DRAIN_NO_REPLACE, outcome=Done("drained")))
    assert isinstance(drained, Move) and drained.target is State.HELD


@pytest.mark.parametrize(
    ("state", "ladder"),
    [
        (State.QUARANTINED, CORDON_ONLY),
        (State.CHECKPOINTING, (LadderStep("cordon"), LadderStep("checkpoint"))),
        (State.DRAINING, DRAIN_NO_REPLACE),
    ],
)
def test_a_dry_run_that_stops_early_ends_without_holding(
    state: State, ladder: tuple[LadderStep, ...]
) -> None:
    """It fenced nothing: a hold would page on-call and block the node for live policies."""
    dry = plan(at(state, ladder, outcome=Done("dry run: would act"), dry_run=True))
    assert isinstance(dry, Move) and dry.target is State.SUCCEEDED
    assert "ladder ends after" in dry.detail["dry_run_would_hold"]
    assert "hold_reason" not in dry.fields
    assert dry.target in TRANSITIONS[state]


def test_opt_out_hold_resumes_by_itself_once_the_pods_are_gone() -> None:
    still = plan(at(State.HELD_BY_OPT_OUT, opt_out=Held("eval/x carries the label")))
    assert isinstance(still, Stay) and still.fields == {"hold_reason": "eval/x carries the label"}
    cleared = plan(at(State.HELD_BY_OPT_OUT, opt_out=Done("no pod opts out")))
    assert cleared == Move(State.CHECKPOINTING, "opt_out_cleared", {}, {"hold_reason": None})
    skip = plan(at(State.HELD_BY_OPT_OUT, DRAIN_NO_REPLACE, opt_out=Done("gone")))
    assert isinstance(skip, Move) and skip.target is State.DRAINING


def test_waiting_writes_progress_only_when_it_changes() -> None:
    waiting = Waiting("draining n1: 2 pod(s) left", 1.5, {"pods": [1, 2], "elapsed_seconds": 1})
    first = plan(at(State.DRAINING, outcome=waiting))
    assert isinstance(first, Stay) and first.retry_after == 1.5 and first.note == "progress"
    signature = first.detail["signature"]
    later = Waiting(waiting.reason, 1.5, {"pods": [1, 2], "elapsed_seconds": 9})
    again = plan(at(State.DRAINING, outcome=later, last_progress=signature))
    assert isinstance(again, Stay) and again.note is None and again.detail == {}
    moved = Waiting("draining n1: 1 pod(s) left", 1.0, {"pods": [2]})
    changed = plan(at(State.DRAINING, outcome=moved, last_progress=signature))
    assert isinstance(changed, Stay) and changed.note == "progress"


def test_replacement_operation_is_persisted_as_soon_as_it_is_known() -> None:
    waiting = Waiting("replacement op-1 is pending", 2.0, {"operation_id": "op-1"})
    first = plan(at(State.REPLACING, outcome=waiting))
    assert isinstance(first, Stay) and first.fields["replacement_operation_id"] == "op-1"
    known = plan(at(State.REPLACING, outcome=waiting, operation_id="op-1"))
    assert isinstance(known, Stay) and "replacement_operation_id" not in known.fields
    done = Done("n1 replaced by n9", {"operation_id": "op-1", "new_node": "n9"})
    verify = plan(at(State.REPLACING, outcome=done, operation_id="op-1"))
    assert isinstance(verify, Move) and verify.target is State.VERIFYING
    assert verify.fields["new_node"] == "n9"
    assert plan(at(State.VERIFYING, outcome=Done("ready"))) == Move(
        State.SUCCEEDED,
        "verify_done",
        {"result": "ready"},
        {"attempts": 0, "error": None, "next_attempt_at": None, "outcome": "replaced"},
    )


def test_failed_replacement_forgets_its_operation_so_a_retry_asks_again() -> None:
    failed = plan(at(State.REPLACING, outcome=Failed("op-1 failed: no capacity")))
    assert isinstance(failed, Move) and failed.target is State.FAILED
    assert failed.action == "replacement_failed"
    assert failed.fields["replacement_operation_id"] is None
    assert failed.fields["error"] == "op-1 failed: no capacity"


def test_held_outcomes_hold_with_their_reason() -> None:
    held = plan(at(State.DRAINING, outcome=Held("node pool p has no spare capacity")))
    assert isinstance(held, Move) and held.target is State.HELD and held.action == "drain_held"
    assert held.fields["hold_reason"] == "node pool p has no spare capacity"


def test_transient_errors_back_off_then_hold() -> None:
    first = plan(at(State.REPLACING, error="503 from the node-pool API", error_delay=1.0))
    assert isinstance(first, Stay) and first.fields == {
        "attempts": 1,
        "error": "503 from the node-pool API",
    }
    assert first.note == "retrying" and first.retry_after >= 1.0
    later = plan(at(State.REPLACING, error="503", attempts=10))
    assert isinstance(later, Stay) and later.retry_after == planner.MAX_BACKOFF_SECONDS
    last = planner.MAX_TRANSIENT_ATTEMPTS - 1
    gave_up = plan(at(State.REPLACING, error="503", attempts=last))
    assert isinstance(gave_up, Move) and gave_up.target is State.HELD
    verifying = plan(at(State.VERIFYING, error="timeout", attempts=last))
    assert isinstance(verifying, Move) and verifying.target is State.FAILED


def test_permanent_errors_fail_the_step() -> None:
    gone = plan(at(State.QUARANTINED, permanent_error="node n1 not found"))
    assert isinstance(gone, Move) and gone.target is State.FAILED
    assert gone.action == "quarantine_failed" and gone.fields["error"] == "node n1 not found"


OUTCOMES = st.one_of(
    st.builds(Done, st.text(max_size=5)),
    st.builds(Waiting, st.text(max_size=5), st.floats(0, 10)),
    st.builds(Held, st.text(max_size=5)),
    st.builds(Failed, st.text(max_size=5)),
    st.none(),
)
CHECKPOINT_ONLY = (LadderStep("cordon"), LadderStep("checkpoint"))
LADDERS = st.sampled_from([FULL, CORDON_ONLY, CHECKPOINT_ONLY, DRAIN_NO_REPLACE, NOTIFY_ONLY])


@given(
    state=st.sampled_from(list(State)),
    ladder=LADDERS,
    outcome=OUTCOMES,
    opt_out=OUTCOMES,
    approval=st.booleans(),
    dry_run=st.booleans(),
    error=st.one_of(st.none(), st.just("boom")),
    attempts=st.integers(0, planner.MAX_TRANSIENT_ATTEMPTS),
)
def test_every_move_is_allowed_by_the_table(
    state: State,
    ladder: tuple[LadderStep, ...],
    outcome: Done | Waiting | Held | Failed | None,
    opt_out: Done | Waiting | Held | Failed | None,
    approval: bool,
    dry_run: bool,
    error: str | None,
    attempts: int,
) -> None:
    if state in planner.STEP_NAMES and state not in work_states(ladder):
        return  # the engine never puts a remediation in a step its ladder lacks
    decided = plan(
        Situation(
            state=state,
            ladder=ladder,
            approval_required=approval,
            dry_run=dry_run,
            outcome=outcome,
            opt_out=opt_out,
            error=error,
            attempts=attempts,
        )
    )
    if isinstance(decided, Move):
        assert decided.target in TRANSITIONS[state], (state, decided)
    else:
        assert decided.retry_after >= 0


def test_a_provider_retry_after_is_honoured_however_long() -> None:
    """Problem 12: the engine's backoff cap (30 s) cut a 60 s Retry-After short."""
    decided = plan(at(State.REPLACING, error="503: retry after 60s", error_delay=60.0))
    assert isinstance(decided, Stay) and decided.retry_after == 60.0
    hour = plan(at(State.REPLACING, error="429", error_delay=3600.0, attempts=3))
    assert isinstance(hour, Stay) and hour.retry_after == 3600.0


def test_an_unavailable_kubernetes_api_is_waited_out_as_progress_never_given_up() -> None:
    error = "evict pod a/b: 503 The server is currently unable to handle the request"
    last = planner.MAX_TRANSIENT_ATTEMPTS + 5
    first = plan(at(State.DRAINING, error=error, error_delay=1.0, api_unavailable=True))
    assert isinstance(first, Stay) and first.note == "progress"
    assert first.reason == f"Kubernetes API unavailable: {error}, retrying"
    assert first.detail["api_unavailable"] is True and first.fields == {"attempts": 1}
    # The same trouble again writes no second line; it never holds, and Retry-After wins.
    signature = first.detail["signature"]
    again = plan(
        at(
            State.DRAINING,
            error=error,
            error_delay=30.0,
            api_unavailable=True,
            attempts=last,
            last_progress=signature,
        )
    )
    assert isinstance(again, Stay) and again.note is None and again.retry_after == 30.0
    capped = plan(
        at(State.DRAINING, error=error, error_delay=1.0, api_unavailable=True, attempts=9)
    )
    assert isinstance(capped, Stay) and capped.retry_after == planner.API_BACKOFF_SECONDS


def test_a_wait_on_something_unreachable_is_a_hold_with_its_reason_while_it_lasts() -> None:
    """slurmctld down: the step waits, and the API's hold_reason says why (issue 22 item 4)."""
    reason = (
        "holding the drain: list Slurm nodes: slurmctld unreachable: Slurmctld(primary) is DOWN"
    )
    waiting = Waiting(reason, 5.0, {"slurm_node": "n1", "holding": True})
    held = plan(Situation(state=State.QUARANTINED, ladder=FULL, outcome=waiting))
    assert isinstance(held, Stay) and held.fields["hold_reason"] == reason
    same = plan(
        Situation(state=State.QUARANTINED, ladder=FULL, outcome=waiting, hold_reason=reason)
    )
    assert isinstance(same, Stay) and "hold_reason" not in same.fields
    plain = Waiting("waiting for 1 Slurm job(s) to leave", 2.0, {"slurm_node": "n1"})
    back = plan(
        Situation(state=State.CHECKPOINTING, ladder=FULL, outcome=plain, hold_reason=reason)
    )
    assert isinstance(back, Stay) and back.fields["hold_reason"] is None
    done = plan(
        Situation(state=State.QUARANTINED, ladder=FULL, outcome=Done("drained"), hold_reason=reason)
    )
    assert isinstance(done, Move) and done.fields["hold_reason"] is None
