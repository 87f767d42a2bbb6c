"""The repair steps in the policy schema: order, what they need before them, on_failure."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from remediator.policy.schema import Policy

BASE: dict[str, Any] = {
    "name": "p",
    "description": "d",
    "why": "NVIDIA XID catalog",
    "match": {"kind": "xid", "codes": [79]},
}


def policy(actions: list[str], **extra: Any) -> Policy:
    return Policy.model_validate({**BASE, "actions": [{"action": a} for a in actions], **extra})


def test_a_full_repair_ladder_with_a_fallback_is_valid() -> None:
    p = policy(
        ["cordon", "drain", "reset_gpu", "reboot", "diagnose", "uncordon"], on_failure="replace"
    )
    assert p.on_failure == "replace"


@pytest.mark.parametrize(
    ("actions", "extra", "problem"),
    [
        (["cordon", "drain", "diagnose", "uncordon", "replace"], {}, "not both"),
        (["cordon", "reboot", "diagnose", "uncordon"], {}, "need a drain"),
        (["cordon", "drain", "reboot", "uncordon"], {}, "uncordon needs diagnose or validate"),
        (["cordon", "drain", "replace"], {"on_failure": "replace"}, "on_failure needs"),
        (["cordon", "drain", "diagnose", "uncordon"], {"on_failure": "Retry!"}, "lowercase"),
        (["cordon", "drain", "diagnose", "uncordon"], {"on_failure": "p"}, "fallback loop"),
        (["cordon", "drain", "diagnose", "reboot", "uncordon"], {}, "follow the order"),
    ],
)
def test_invalid_repair_ladders_say_why(
    actions: list[str], extra: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        policy(actions, **extra)


def test_diagnose_levels_are_dcgms() -> None:
    with pytest.raises(ValidationError):
        Policy.model_validate(
            {
                **BASE,
                "actions": [
                    {"action": "cordon"},
                    {"action": "drain"},
                    {"action": "diagnose", "level": 4},
                ],
            }
        )
