"""The validate step in the planner: after `replace` on the new machine and before `uncordon` on
a repaired node; a new machine that fails is replaced again up to max_replacements, then held;
a repaired node that fails goes to its ladder's fallback. Every move is one the table allows."""

from __future__ import annotations

from remediator.actions.outcome import Done, Failed, Held
from remediator.model.states import State, check_transition
from remediator.policy.ladder import LadderStep, ladder_from_policy, parse_ladder
from remediator.policy.schema import (
    Cordon,
    Diagnose,
    Drain,
    Reboot,
    Replace,
    Uncordon,
    Validate,
)
from remediator.remediation.planner import Move, Plan, Situation, plan, work_states

VALIDATE = Validate(action="validate", busbw_floor={"NVIDIA H100 80GB HBM3": 400.0})
REPLACE = ladder_from_policy(
    [Cordon(action="cordon"), Drain(action="drain"), Replace(action="replace"), VALIDATE]
)
REPAIR = ladder_from_policy(
    [
        Cordon(action="cordon"),
        Drain(action="drain"),
        Reboot(action="reboot"),
        Diagnose(action="diagnose"),
        VALIDATE,
        Uncordon(action="uncordon"),
    ],
    "replace",
)
REPAIR_ONLY = ladder_from_policy(
    [
        Cordon(action="cordon"),
        Drain(action="drain"),
        Reboot(action="reboot"),
        VALIDATE,
        Uncordon(action="uncordon"),
    ]
)


def at(state: State, ladder: tuple[LadderStep, ...], **kw: object) -> Situation:
    return Situation(state=state, ladder=ladder, **kw)  # type: ignore[arg-type]


def moved(state: State, decided: Plan) -> Move:
    assert isinstance(decided, Move)
    check_transition(state, decided.target)
    return decided


def test_the_ladder_stores_the_checks_and_walks_validate_in_place() -> None:
    assert parse_ladder([s.to_json() for s in REPLACE]) == REPLACE
    assert work_states(REPLACE) == (
        State.QUARANTINED,
        State.DRAINING,
        State.REPLACING,
        State.VALIDATING,
        State.VERIFYING,
    )
    assert work_states(REPAIR)[-2:] == (State.VALIDATING, State.UNCORDONING)
    checks = REPLACE[-1].checks
    assert checks is not None and checks["max_replacements"] == 2
    assert checks["dcgm_level"] == 2 and checks["dcgm_level_new"] == 3


def test_a_replacement_is_validated_before_it_is_verified() -> None:
    move = moved(State.REPLACING, plan(at(State.REPLACING, REPLACE, outcome=Done("new"))))
    assert move.target is State.VALIDATING
    passed = at(State.VALIDATING, REPLACE, new_node="n-new", replacements=1, outcome=Done("ok"))
    assert moved(State.VALIDATING, plan(passed)).target is State.VERIFYING


def test_a_new_machine_that_fails_is_replaced_again_then_held_with_the_evidence() -> None:
    bad = Failed("DCGM level 3: PCIe on GPU 2", {"node": "n-new", "checks": [{"check": "dcgm"}]})
    first = moved(
        State.VALIDATING,
        plan(at(State.VALIDATING, REPLACE, new_node="n-new", replacements=1, outcome=bad)),
    )
    assert first.target is State.REPLACING and first.action == "validate_failed"
    assert first.detail["replaced_again"] == "n-new"
    assert first.detail["checks"] == [{"check": "dcgm"}]
    assert first.fields["replacement_operation_id"] is None
    second = moved(
        State.VALIDATING,
        plan(at(State.VALIDATING, REPLACE, new_node="n-new2", replacements=2, outcome=bad)),
    )
    assert second.target is State.HELD
    assert "after 2 replacement(s)" in second.fields["hold_reason"]
    assert "PCIe on GPU 2" in second.fields["hold_reason"]
    assert "replaced_again" not in second.detail


def test_max_replacements_zero_holds_the_first_bad_machine() -> None:
    ladder = ladder_from_policy(
        [
            Cordon(action="cordon"),
            Drain(action="drain"),
            Replace(action="replace"),
            Validate(action="validate", nccl=False, max_replacements=0),
        ]
    )
    decided = plan(at(State.VALIDATING, ladder, new_node="n", replacements=1, outcome=Failed("x")))
    assert moved(State.VALIDATING, decided).target is State.HELD


def test_a_repaired_node_is_validated_before_uncordon_and_a_failure_escalates() -> None:
    diag = moved(State.DIAGNOSING, plan(at(State.DIAGNOSING, REPAIR, outcome=Done("ok"))))
    assert diag.target is State.VALIDATING
    passed = moved(State.VALIDATING, plan(at(State.VALIDATING, REPAIR, outcome=Done("ok"))))
    assert passed.target is State.UNCORDONING
    slow = Failed("all_reduce_perf: bus bandwidth 210 GB/s is under the floor")
    failed = moved(State.VALIDATING, plan(at(State.VALIDATING, REPAIR, outcome=slow)))
    assert failed.target is State.REPLACING and failed.detail["escalated_to"] == "replace"
    # No fallback: the node stays fenced, failed, for a human.
    alone = moved(State.VALIDATING, plan(at(State.VALIDATING, REPAIR_ONLY, outcome=slow)))
    assert alone.target is State.FAILED


def test_an_unschedulable_check_is_a_hold_not_a_failure() -> None:
    held = Held("validation Job cannot run on n-new: 0/1 nodes are available")
    decided = plan(at(State.VALIDATING, REPLACE, new_node="n-new", outcome=held))
    move = moved(State.VALIDATING, decided)
    assert move.target is State.HELD and "cannot run" in move.fields["hold_reason"]


def test_the_escalated_replacement_is_validated_as_a_new_machine() -> None:
    move = moved(State.REPLACING, plan(at(State.REPLACING, REPAIR, outcome=Done("new"))))
    assert move.target is State.VALIDATING
    passed = at(State.VALIDATING, REPAIR, new_node="n-new", replacements=1, outcome=Done("ok"))
    assert moved(State.VALIDATING, plan(passed)).target is State.VERIFYING
