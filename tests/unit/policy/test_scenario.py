from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from remediator.policy.ladder import LadderStep
from remediator.policy.loader import load_policy_dir
from remediator.policy.scenario import Scenario, TimelineEntry, run_scenario

POLICY = """\
policies:
  - name: lost
    description: fell off the bus
    why: a dead GPU
    match: {kind: xid, codes: [79]}
    actions: [{action: cordon}, {action: replace}]
    cooldown: 1h
"""


def test_timeline_repeats_until_inclusive() -> None:
    entry = TimelineEntry.model_validate({"at": "30s", "every": "30s", "until": "2m"})
    assert [t.total_seconds() for t in entry.times()] == [30, 60, 90, 120]
    single = TimelineEntry.model_validate({"at": "5m"})
    assert list(single.times()) == [timedelta(minutes=5)]


@pytest.mark.parametrize(
    "data", [{"at": "0s", "every": "30s"}, {"at": "0s", "every": "0s", "until": "1m"}]
)
def test_timeline_repeat_needs_a_positive_step_and_an_end(data: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        TimelineEntry.model_validate(data)


def scenario(**extra: object) -> Scenario:
    data: dict[str, object] = {
        "name": "s",
        "fleet": [{"name": f"n{i}", "pool": "p"} for i in range(4)],
        "timeline": [
            {"at": "0s", "signals": [{"node": "n1", "kind": "xid", "code": 79}]},
            {"at": "1m", "signals": [{"node": "n2", "kind": "xid", "code": 79}]},
            {"at": "2m", "resolve": ["n1"]},
            {"at": "3m", "signals": [{"node": "n2", "kind": "xid", "code": 79}]},
        ],
        "expect": [
            {"at": "0s", "node": "n1", "policy": "lost"},
            {"at": "1m", "node": "n2", "policy": "lost", "outcome": "held"},
            {"at": "3m", "node": "n2", "policy": "lost"},
        ],
    }
    data.update(extra)
    return Scenario.model_validate(data)


def test_budget_holds_until_a_remediation_resolves(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(POLICY)
    (tmp_path / "settings.yaml").write_text("max_unhealthy: {per_pool: {percent: 10}}\n")
    outcomes = run_scenario(scenario(), load_policy_dir(tmp_path))
    assert [o.passed for o in outcomes] == [True, True, True]


def test_settings_override_and_history(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(POLICY)
    roomy = {"max_unhealthy": {"per_pool": {"percent": 100}}}
    outcomes = run_scenario(
        scenario(
            settings=roomy,
            history=[{"node": "n2", "policy": "lost", "ago": "58m"}],
            expect=[
                {"at": "0s", "node": "n1", "policy": "lost"},
                {"at": "1m", "node": "n2", "policy": "none"},
                {"at": "3m", "node": "n2", "policy": "lost"},
            ],
        ),
        load_policy_dir(tmp_path),
    )
    assert [(o.passed, o.actual) for o in outcomes] == [
        (True, "lost (admitted)"),
        (True, "none"),
        (True, "lost (admitted)"),
    ]


def walked(**expect: object) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "walk",
            "fleet": [{"name": "n1", "pool": "p"}],
            "timeline": [{"at": "0s", "signals": [{"node": "n1", "kind": "xid", "code": 79}]}],
            "expect": [{"at": "0s", "node": "n1", "policy": "lost", **expect}],
        }
    )


def fake_walk(
    ladder: Sequence[LadderStep], fail: Collection[str], validations: Sequence[Collection[str]]
) -> list[str]:
    """Stands in for the planner's walk (remediation/walk.py): what it was given, as a path."""
    assert [s.action for s in ladder] == ["cordon", "replace"]
    return ["quarantined", f"fail={sorted(fail)}", f"validations={list(validations)}", "held"]


def test_an_expectation_follows_the_remediation_with_the_steps_it_states(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(POLICY)
    policy_set = load_policy_dir(tmp_path)
    steps = {"fail": ["reboot"], "validation": [{"fails": ["nccl"]}, {}]}
    want = ["quarantined", "fail=['reboot']", "validations=[frozenset({'nccl'}), frozenset()]"]
    (ok,) = run_scenario(walked(steps=steps, path=[*want, "held"]), policy_set, fake_walk)
    assert ok.passed, ok.line()
    (wrong,) = run_scenario(walked(steps=steps, ends="succeeded"), policy_set, fake_walk)
    assert not wrong.passed and "got lost (admitted) path quarantined" in wrong.line()
    (unwalked,) = run_scenario(walked(ends="held"), policy_set)
    assert not unwalked.passed and "no walk" in unwalked.line()


@pytest.mark.parametrize(
    ("expect", "words"),
    [
        ({"steps": {"validation": [{"fails": ["nccl"]}]}}, "steps needs path or ends"),
        ({"steps": {"validation": [{"fails": ["speed"]}]}, "ends": "held"}, "fails"),
        ({"steps": {"fail": ["pray"]}, "ends": "held"}, "fail"),
        ({"ends": "done"}, "ends"),
    ],
)
def test_a_walk_expectation_that_cannot_be_checked_is_refused(
    expect: dict[str, object], words: str
) -> None:
    with pytest.raises(ValidationError, match=words):
        walked(**expect)
