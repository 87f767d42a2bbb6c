"""Matching budgets to a refused pod and the line on-call reads about each."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.actions import pdbs
from remediator.kube.objects import LabelSelector, PodDisruptionBudget
from tests.unit.actions.builders import pod


def budget(name: str, selector: dict[str, Any] | None, **spec_status: Any) -> PodDisruptionBudget:
    raw: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {k: v for k, v in spec_status.items() if k in ("minAvailable", "maxUnavailable")},
        "status": {
            "currentHealthy": spec_status.get("healthy", 2),
            "desiredHealthy": spec_status.get("desired", 3),
            "expectedPods": spec_status.get("expected", 3),
            "disruptionsAllowed": spec_status.get("allowed", 0),
        },
    }
    if selector is not None:
        raw["spec"]["selector"] = selector
    return PodDisruptionBudget.from_json(raw)


LLM = pod("llm-0", labels={"app": "llm", "tier": "serving", "zone": "a"})


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ({"matchLabels": {"app": "llm"}}, True),
        ({"matchLabels": {"app": "llm", "tier": "batch"}}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["serving"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["batch"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["batch"]}]}, True),
        ({"matchExpressions": [{"key": "gone", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),
        (
            {
                "matchLabels": {"app": "llm"},
                "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}],
            },
            False,
        ),
        ({}, True),  # policy/v1: an empty selector selects every pod of the namespace
        (None, False),  # no selector at all selects nothing
    ],
)
def test_selector_semantics(selector: dict[str, Any] | None, selected: bool) -> None:
    assert budget("b", selector).selects(LLM) is selected


def test_a_budget_never_selects_another_namespaces_pod() -> None:
    other = PodDisruptionBudget("inference", "b", LabelSelector())
    assert not other.selects(LLM)


def test_blocking_lists_every_match_by_name() -> None:
    found = pdbs.blocking(
        LLM,
        [
            budget("z-all", {}),
            budget("other", {"matchLabels": {"app": "web"}}),
            budget("a-llm", {"matchLabels": {"app": "llm"}}),
        ],
    )
    assert [b.name for b in found] == ["a-llm", "z-all"]


def test_the_line_names_budget_numbers_and_spec() -> None:
    b = budget("llm-pdb", {"matchLabels": {"app": "llm"}}, minAvailable=3)
    assert pdbs.describe(b) == (
        "disruption budget ml/llm-pdb: 2 of 3 healthy, needs 3, 0 disruptions allowed "
        "(minAvailable 3)"
    )
    percent = budget("llm-pdb", {}, maxUnavailable="10%", healthy=9, desired=9, expected=10)
    assert pdbs.describe(percent) == (
        "disruption budget ml/llm-pdb: 9 of 10 healthy, needs 9, 0 disruptions allowed "
        "(maxUnavailable 10%)"
    )
    one = budget("llm-pdb", {}, healthy=4, desired=3, expected=4, allowed=1)
    assert (
        pdbs.describe(one)
        == "disruption budget ml/llm-pdb: 4 of 4 healthy, needs 3, 1 disruption allowed"
    )


def test_explain_joins_overlapping_budgets_and_is_empty_without_a_match() -> None:
    both = [budget("a", {"matchLabels": {"app": "llm"}}), budget("b", {}, minAvailable="50%")]
    assert pdbs.explain(LLM, both) == (
        "disruption budget ml/a: 2 of 3 healthy, needs 3, 0 disruptions allowed; "
        "disruption budget ml/b: 2 of 3 healthy, needs 3, 0 disruptions allowed (minAvailable 50%)"
    )
    assert pdbs.explain(LLM, [budget("web", {"matchLabels": {"app": "web"}})]) == ""


def test_facts_carry_the_numbers() -> None:
    b = budget("llm-pdb", {}, minAvailable=3)
    assert pdbs.facts(b) == {
        "name": "ml/llm-pdb",
        "current_healthy": 2,
        "desired_healthy": 3,
        "expected_pods": 3,
        "disruptions_allowed": 0,
        "min_available": 3,
    }


def test_a_budget_with_no_status_yet_reads_as_zeros() -> None:
    raw = {"metadata": {"name": "new", "namespace": "ml"}, "spec": {"minAvailable": 1}}
    fresh = PodDisruptionBudget.from_json(raw)
    assert fresh.selector is None
    assert (fresh.current_healthy, fresh.expected_pods, fresh.disruptions_allowed) == (0, 0, 0)
