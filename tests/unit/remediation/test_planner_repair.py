"""The repair ladder in the planner: reset/reboot/diagnose/uncordon in order, `repaired` and
`replaced` outcomes, and a failed repair escalating to a replacement with `on_failure`."""

from __future__ import annotations

from remediator.actions.outcome import Done, Failed
from remediator.model.states import State, check_transition
from remediator.policy.ladder import LadderStep, ladder_from_policy, parse_ladder
from remediator.policy.schema import Cordon, Diagnose, Drain, Reboot, ResetGpu, Uncordon
from remediator.remediation.planner import Move, Situation, plan, step_of, work_states

ACTIONS = [
    Cordon(action="cordon"),
    Drain(action="drain"),
    ResetGpu(action="reset_gpu"),
    Reboot(action="reboot", max_reboots=2),
    Diagnose(action="diagnose", level=1),
    Uncordon(action="uncordon"),
]
REPAIR = ladder_from_policy(ACTIONS, "replace")
NO_FALLBACK = ladder_from_policy(ACTIONS)


def at(state: State, ladder: tuple[LadderStep, ...] = REPAIR, **kw: object) -> Situation:
    return Situation(state=state, ladder=ladder, **kw)  # type: ignore[arg-type]


def test_the_fallback_is_stored_but_not_walked() -> None:
    assert REPAIR[-1] == LadderStep("replace", fallback=True)
    assert parse_ladder([s.to_json() for s in REPAIR]) == REPAIR
    assert step_of(REPAIR, "replace") is None
    assert work_states(REPAIR) == (
        State.QUARANTINED,
        State.DRAINING,
        State.RESETTING_GPU,
        State.REBOOTING,
        State.DIAGNOSING,
        State.UNCORDONING,
    )
    reboot = step_of(REPAIR, "reboot")
    assert reboot is not None and reboot.limit == 2 and reboot.window_seconds == 7 * 86400
    diagnose = step_of(REPAIR, "diagnose")
    assert diagnose is not None and diagnose.level == 1


def test_each_repair_step_leads_to_the_next_and_uncordon_ends_repaired() -> None:
    walk = [
        (State.DRAINING, State.RESETTING_GPU),
        (State.RESETTING_GPU, State.REBOOTING),
        (State.REBOOTING, State.DIAGNOSING),
        (State.DIAGNOSING, State.UNCORDONING),
    ]
    for state, target in walk:
        move = plan(at(state, outcome=Done("ok")))
        assert isinstance(move, Move) and move.target is target
        check_transition(state, target)
    end = plan(at(State.UNCORDONING, outcome=Done("released")))
    assert isinstance(end, Move) and end.target is State.SUCCEEDED
    assert end.action == "uncordon_done" and end.fields["outcome"] == "repaired"


def test_a_failed_repair_escalates_to_replace_and_ends_replaced() -> None:
    for state in (State.RESETTING_GPU, State.REBOOTING, State.DIAGNOSING):
        move = plan(at(state, outcome=Failed("diagnostics failed", {"level": 1})))
        assert isinstance(move, Move) and move.target is State.REPLACING, state
        assert move.detail["escalated_to"] == "replace" and move.detail["level"] == 1
        check_transition(state, State.REPLACING)
    replaced = plan(at(State.REPLACING, outcome=Done("n1 → n9", {"new_node": "n9"})))
    assert isinstance(replaced, Move) and replaced.target is State.VERIFYING
    verified = plan(at(State.VERIFYING, outcome=Done("ready")))
    assert isinstance(verified, Move) and verified.fields["outcome"] == "replaced"


def test_without_a_fallback_a_failed_repair_fails() -> None:
    move = plan(at(State.REBOOTING, NO_FALLBACK, outcome=Failed("not back")))
    assert isinstance(move, Move) and move.target is State.FAILED
    assert move.action == "reboot_failed"


def test_a_permanent_error_in_a_repair_escalates_too() -> None:
    move = plan(at(State.DIAGNOSING, permanent_error="the Job template does not render"))
    assert isinstance(move, Move) and move.target is State.REPLACING


def test_a_dry_run_repair_ends_without_an_outcome() -> None:
    end = plan(at(State.UNCORDONING, outcome=Done("dry run"), dry_run=True))
    assert isinstance(end, Move) and end.target is State.SUCCEEDED
    assert end.fields["outcome"] is None
