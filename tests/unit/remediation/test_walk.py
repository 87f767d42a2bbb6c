"""The walk `remediator policy test` uses: a remediation's states for stated step results, every
move decided by the engine's own planner and allowed by the state table."""

from __future__ import annotations

from itertools import pairwise

from remediator.model.states import State, check_transition
from remediator.policy.ladder import ladder_from_policy
from remediator.policy.schema import Cordon, Diagnose, Drain, Reboot, Replace, Uncordon, Validate
from remediator.remediation.walk import walk

VALIDATE = Validate(action="validate", busbw_floor={"NVIDIA H100 80GB HBM3": 400.0})
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
REPLACE_ONLY = ladder_from_policy(
    [
        Cordon(action="cordon"),
        Drain(action="drain"),
        Replace(action="replace"),
        Validate(
            action="validate", busbw_floor={"NVIDIA H100 80GB HBM3": 400.0}, max_replacements=1
        ),
    ]
)


def legal(path: list[str]) -> None:
    states = [State.DETECTED, *(State(s) for s in path)]
    for before, after in pairwise(states):
        check_transition(before, after)


def test_every_step_passing_returns_the_repaired_node() -> None:
    path = walk(REPAIR, (), ())
    assert path == [
        "quarantined",
        "draining",
        "rebooting",
        "diagnosing",
        "validating",
        "uncordoning",
        "succeeded",
    ]
    legal(path)


def test_a_failed_repair_validation_goes_on_to_replacement() -> None:
    path = walk(REPAIR, (), [{"nccl"}])
    assert path[-5:] == ["validating", "replacing", "validating", "verifying", "succeeded"]
    legal(path)


def test_dead_on_arrival_counts_replacements_per_remediation() -> None:
    path = walk(REPLACE_ONLY, (), [{"dcgm"}])
    assert path == ["quarantined", "draining", "replacing", "validating", "held"]
    path = walk(REPAIR, {"diagnose"}, [{"dcgm"}, {"inventory"}])
    assert path.count("replacing") == 2 and path[-1] == "held"
    legal(path)


def test_a_failing_step_with_no_fallback_fails_the_remediation() -> None:
    ladder = ladder_from_policy(
        [Cordon(action="cordon"), Reboot(action="reboot"), VALIDATE, Uncordon(action="uncordon")]
    )
    assert walk(ladder, {"reboot"}, ()) == ["quarantined", "rebooting", "failed"]
