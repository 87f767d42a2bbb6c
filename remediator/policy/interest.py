"""The loaded policy set → what the sources need to ask for (signals/interest.py).

Per kind the lowest level any policy could act on: for a policy acting above a level, a reading
at or below its `clear` level (or under its trigger, without one) ends its streaks and does
nothing else; below-policies mirror that. A kind with a policy that acts on any reading (no
threshold, or a threshold without a level) keeps every reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from remediator.policy.schema import Policy
from remediator.signals.interest import Interest, ReadingFilter
from remediator.signals.model import SignalKind

# Prometheus evaluates a little after the controller's clock read the time of a streak's last
# reading; the look-back must reach past the longest gap by more than that.
RECENT_MARGIN = timedelta(minutes=1)


def interest_of(policies: Sequence[Policy]) -> Interest:
    by_kind: dict[SignalKind, list[Policy]] = {}
    for policy in policies:
        by_kind.setdefault(policy.match.kind, []).append(policy)
    readings = {
        kind: found for kind, members in by_kind.items() if (found := _filter(members)) is not None
    }
    shortest: dict[SignalKind, timedelta] = {}
    for policy in policies:
        threshold = policy.match.threshold
        if threshold is None or threshold.for_ <= timedelta(0):
            continue
        kind = policy.match.kind
        shortest[kind] = min(threshold.for_, shortest.get(kind, threshold.for_))
    return Interest(kinds=frozenset(by_kind), readings=readings, shortest_for=shortest)


def _filter(policies: Sequence[Policy]) -> ReadingFilter | None:
    at_least: list[float] = []
    at_most: list[float] = []
    gaps: list[timedelta] = []
    for policy in policies:
        threshold = policy.match.threshold
        if threshold is None:
            return None
        gaps.append(threshold.gap)
        if threshold.above is not None:
            at_least.append(threshold.clear if threshold.clear is not None else threshold.above)
        elif threshold.below is not None:
            at_most.append(threshold.clear if threshold.clear is not None else threshold.below)
        else:
            return None
    return ReadingFilter(
        at_least=min(at_least) if at_least else None,
        at_most=max(at_most) if at_most else None,
        recent=max(gaps) + RECENT_MARGIN,
    )
