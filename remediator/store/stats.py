"""Pure arithmetic for the overview: percentiles and per-step durations from a timeline.

Done in Python over a bounded window because percentile SQL differs between the backends.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from remediator.store.records import Percentiles


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); `q` in [0, 1]."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be within [0, 1], not {q}")
    position = (len(sorted_values) - 1) * q
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarise(values: Iterable[float]) -> Percentiles | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return Percentiles(len(ordered), percentile(ordered, 0.5), percentile(ordered, 0.9))


def step_durations(
    transitions: Iterable[tuple[int, datetime, str | None, str]],
) -> dict[str, list[float]]:
    """Seconds spent in each state, from (remediation_id, at, from_state, to_state) rows ordered
    by remediation and time: a state's stay runs from the transition into it to the one out."""
    spent: dict[str, list[float]] = defaultdict(list)
    entered: dict[int, tuple[str, datetime]] = {}
    for remediation_id, at, _from_state, to_state in transitions:
        previous = entered.get(remediation_id)
        if previous is not None:
            state, since = previous
            spent[state].append((at - since).total_seconds())
        entered[remediation_id] = (to_state, at)
    return dict(spent)
