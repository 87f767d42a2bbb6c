"""Schema rules that the loader's line mapping does not already cover."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from remediator.errors import PolicyError
from remediator.policy.loader import load_policy_dir
from remediator.policy.schema import Policy, Threshold
from tests.unit.policy.builders import policy

BROKEN = """\
policies:
  - name: Bad_Name
    description: x
    why: |
      two
      lines
    match: {kind: xid, codes: [-1]}
    approval: maybe
    actions:
      - action: explode
      - {action: drain, on_timeout: later}
      - {grace: 2m}
"""


def test_problems_come_in_line_order_with_readable_messages(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(BROKEN)
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    assert caught.value.problems == [
        "a.yaml:2: policies[0].name: use lowercase letters, digits and '-', at most 63 characters",
        "a.yaml:4: policies[0].why: must be one non-empty line",
        "a.yaml:7: policies[0].match.codes[0]: Input should be greater than or equal to 0",
        "a.yaml:8: policies[0].approval: Input should be 'auto' or 'required'",
        "a.yaml:10: policies[0].actions[0]: unknown action 'explode' (expected one of 'notify', "
        "'cordon', 'taint', 'checkpoint', 'drain', 'reset_gpu', 'reboot', 'diagnose', "
        "'uncordon', 'rma', 'replace', 'validate')",
        "a.yaml:11: policies[0].actions[1].on_timeout: Input should be 'force' or 'hold'",
        "a.yaml:12: policies[0].actions[2]: required field missing: action",
    ]


def test_step_defaults() -> None:
    p = policy("p", {"kind": "xid"}, actions=[{"action": "checkpoint"}, {"action": "drain"}])
    checkpoint, drain = p.actions
    assert checkpoint.action == "checkpoint" and checkpoint.max_grace.total_seconds() == 120
    assert checkpoint.min_grace is None and checkpoint.floor.total_seconds() == 30
    assert drain.action == "drain"
    assert (drain.grace.total_seconds(), drain.timeout.total_seconds(), drain.on_timeout) == (
        120,
        600,
        "hold",
    )


def test_notify_only_is_not_disruptive() -> None:
    quiet = policy("p", {"kind": "xid"}, actions=[{"action": "notify"}, {"action": "notify"}])
    loud = policy("q", {"kind": "xid"}, actions=[{"action": "notify"}, {"action": "cordon"}])
    assert (quiet.disruptive, loud.disruptive) == (False, True)


def test_defaults_are_safe() -> None:
    p = policy("p", {"kind": "xid"})
    assert (p.approval, p.dry_run, p.cooldown, p.priority) == ("auto", False, None, 0)


@pytest.mark.parametrize(
    ("spec", "readings"),
    [
        # (value, breached, cleared)
        ({"above": 78, "clear": 75}, [(79, True, False), (76, False, False), (75, False, True)]),
        ({"above": 78}, [(78, True, False), (77.9, False, True)]),
        ({"below": 10, "clear": 20}, [(5, True, False), (15, False, False), (20, False, True)]),
        ({"for": "1m"}, [(None, True, False), (0, True, False)]),
    ],
)
def test_threshold_levels(
    spec: dict[str, object], readings: list[tuple[float | None, bool, bool]]
) -> None:
    threshold = Threshold.model_validate(spec)
    assert [(v, threshold.breached(v), threshold.cleared(v)) for v, _, _ in readings] == readings


def test_threshold_is_written_with_for_not_for_underscore() -> None:
    with pytest.raises(ValueError, match="for_"):
        Threshold.model_validate({"above": 1, "for_": "1m"})


def test_policy_round_trips_through_its_json_form() -> None:
    p = policy("p", {"kind": "thermal", "threshold": {"above": 78, "for": "2m"}}, cooldown="1h30m")
    dumped = p.model_dump(mode="json", by_alias=True)
    assert dumped["cooldown"] == "1h30m"
    assert dumped["match"]["threshold"]["for"] == "2m"
    assert Policy.model_validate(dumped) == p


def test_the_grace_bounds_are_checked_and_grace_is_the_older_name_of_max_grace() -> None:
    def checkpoint(**fields: str) -> Any:
        actions = [{"action": "checkpoint", **fields}]
        return policy("p", {"kind": "xid"}, actions=actions).actions[0]

    assert checkpoint(grace="90s").max_grace.total_seconds() == 90
    assert checkpoint(max_grace="10s").floor.total_seconds() == 10
    assert checkpoint(min_grace="5s", max_grace="1m").floor.total_seconds() == 5
    for bad in (
        {"min_grace": "2m", "max_grace": "1m"},
        {"min_grace": "0s"},
        {"max_grace": "2h"},
        {"grace": "1m", "max_grace": "1m"},
    ):
        with pytest.raises(ValueError):
            checkpoint(**bad)


def test_a_drain_after_the_grace_step_cannot_grant_a_second_grace() -> None:
    actions = [{"action": "checkpoint"}, {"action": "drain", "grace": "2m"}]
    with pytest.raises(ValueError, match="continues its grace"):
        policy("p", {"kind": "xid"}, actions=actions)
    alone = policy("q", {"kind": "xid"}, actions=[{"action": "drain", "grace": "2m"}])
    assert alone.actions[0].grace.total_seconds() == 120
