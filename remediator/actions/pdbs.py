"""Which PodDisruptionBudgets stand in a drain's way, said the way on-call needs it.

A 429 from the Eviction API names the budget but not what would unblock it; the budget's own
status does: how many pods it counts, how many are healthy, how many it needs. These pure
functions match budgets to a refused pod (label selector semantics, as the eviction subresource
matches them) and turn the numbers into one line per budget for the timeline and the hold reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from remediator.kube.objects import Pod, PodDisruptionBudget


def blocking(pod: Pod, budgets: Iterable[PodDisruptionBudget]) -> list[PodDisruptionBudget]:
    """The budgets that select the pod, by name; more than one is the eviction API's 500 case."""
    return sorted((b for b in budgets if b.selects(pod)), key=lambda b: b.name)


def describe(budget: PodDisruptionBudget) -> str:
    """e.g. "disruption budget inference/llm-pdb: 2 of 3 healthy, needs 3, 0 disruptions allowed
    (minAvailable 3)" — named as such, so that a hold reason says what blocks the drain."""
    text = (
        f"disruption budget {budget.key}: "
        f"{budget.current_healthy} of {budget.expected_pods} healthy, "
        f"needs {budget.desired_healthy}, {budget.disruptions_allowed} "
        f"disruption{'' if budget.disruptions_allowed == 1 else 's'} allowed"
    )
    if budget.min_available is not None:
        return f"{text} (minAvailable {budget.min_available})"
    if budget.max_unavailable is not None:
        return f"{text} (maxUnavailable {budget.max_unavailable})"
    return text


def explain(pod: Pod, budgets: Iterable[PodDisruptionBudget]) -> str:
    """One line naming every budget that holds the pod; empty when none matches (the budget
    was deleted or changed since the refusal)."""
    return "; ".join(describe(b) for b in blocking(pod, budgets))


def facts(budget: PodDisruptionBudget) -> dict[str, Any]:
    """The budget's numbers as JSON for the timeline."""
    out: dict[str, Any] = {
        "name": budget.key,
        "current_healthy": budget.current_healthy,
        "desired_healthy": budget.desired_healthy,
        "expected_pods": budget.expected_pods,
        "disruptions_allowed": budget.disruptions_allowed,
    }
    if budget.min_available is not None:
        out["min_available"] = budget.min_available
    if budget.max_unavailable is not None:
        out["max_unavailable"] = budget.max_unavailable
    return out
