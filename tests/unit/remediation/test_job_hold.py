"""#39 item 15: a validation held because the node could not run its Job is looked at again.
The pure parts: which holds are (`job_hold.rechecks`), what the planner does with a look (back
to validating once the Job runs, the reason kept current, nothing written on a failed look), and
the return to validating is no new round: the same Job and lines, the timeouts from the return."""

from __future__ import annotations

from datetime import timedelta

from remediator.actions.outcome import Done, Held
from remediator.model.states import State, check_transition
from remediator.policy.ladder import ladder_from_policy
from remediator.policy.schema import Cordon, Drain, Reboot, Uncordon, Validate
from remediator.remediation.planner import VALIDATION_JOB_RUNS, Move, Situation, Stay, plan
from remediator.remediation.steps import job_hold, validate
from tests.unit.web.builders import T0, event, record

LADDER = ladder_from_policy(
    [
        Cordon(action="cordon"),
        Drain(action="drain"),
        Reboot(action="reboot"),
        Validate(action="validate", nccl=False),
        Uncordon(action="uncordon"),
    ]
)
BLOCKED = {"node": "gpu-node-1", "job": "remediator-validate-1-0-checks", "unschedulable": "x"}
STALE = "validation Job cannot run on gpu-node-1: the Job does not tolerate the node's taint a"


def held_validation(*more: object, detail: dict[str, object] | None = None) -> list[object]:
    return [
        event(1, 0, State.REBOOTING, State.VALIDATING, "reboot_done"),
        event(2, 5, None, None, validate.STARTED, {"node": "gpu-node-1", "job": BLOCKED["job"]}),
        event(3, 10, State.VALIDATING, State.HELD, "validate_held", detail or BLOCKED),
        *more,
    ]


def at_held(outcome: object = None, **kw: object) -> Situation:
    return Situation(
        state=State.HELD,
        ladder=LADDER,
        outcome=outcome,  # type: ignore[arg-type]
        hold_reason=STALE,
        job_hold=True,
        **kw,  # type: ignore[arg-type]
    )


def test_only_a_validation_held_for_a_job_the_node_could_not_run_is_looked_at_again() -> None:
    assert job_hold.rechecks(record(State.HELD, held_validation()))
    fence = {"node": "gpu-node-1", "reason": "the fence owner refused"}
    assert not job_hold.rechecks(record(State.HELD, held_validation(detail=fence)))
    assert not job_hold.rechecks(record(State.HELD, held_validation(), dry_run=True))
    drain = [event(1, 0, State.DRAINING, State.HELD, "drain_held", {"unschedulable": "x"})]
    assert not job_hold.rechecks(record(State.HELD, drain))
    released = event(4, 20, State.HELD, State.VALIDATING, "released")
    assert not job_hold.rechecks(record(State.VALIDATING, held_validation(released)))


def test_once_the_job_runs_the_hold_goes_back_to_validating_in_one_move() -> None:
    decided = plan(at_held(Done("runs now", {"jobs": [BLOCKED["job"]]})))
    assert isinstance(decided, Move)
    check_transition(State.HELD, decided.target)
    assert (decided.target, decided.action) == (State.VALIDATING, VALIDATION_JOB_RUNS)
    assert decided.fields == {"hold_reason": None}
    assert decided.detail["jobs"] == [BLOCKED["job"]]
    plain = Situation(state=State.HELD, ladder=LADDER, outcome=Done("runs now"))
    assert isinstance(plan(plain), Stay), "any other hold waits for a human"


def test_while_the_job_cannot_run_the_reason_follows_what_keeps_it_off() -> None:
    fresh = "validation Job cannot run on gpu-node-1: the node's taint b"
    decided = plan(at_held(Held(fresh, BLOCKED)))
    assert isinstance(decided, Stay)
    assert decided.fields == {"hold_reason": fresh} and decided.note == "hold_reason_changed"
    same = plan(at_held(Held(STALE, BLOCKED)))
    assert isinstance(same, Stay) and not same.fields and same.note is None
    failed_look = plan(at_held(error="apiserver: connection refused"))
    assert isinstance(failed_look, Stay) and not failed_look.fields and failed_look.note is None


def test_the_return_is_no_new_round_and_its_timeouts_count_from_it() -> None:
    back = event(4, 3600, State.HELD, State.VALIDATING, VALIDATION_JOB_RUNS)
    resumed = record(State.VALIDATING, held_validation(back))
    assert validate.round_of(resumed) == 0
    assert validate.since(resumed) == validate.Since(T0, T0 + timedelta(seconds=3600))
    released = event(5, 4000, State.HELD, State.VALIDATING, "released")
    held_again = event(6, 3900, State.VALIDATING, State.HELD, "validate_held", BLOCKED)
    again = record(State.VALIDATING, held_validation(back, held_again, released))
    assert validate.round_of(again) == 1
    at = T0 + timedelta(seconds=4000)
    assert validate.since(again) == validate.Since(at, at)
