"""Which new machine replaces an old one, when the platform does not say: the one already claimed
for it, else the earliest unclaimed machine created at or after the request. Shared by providers
whose replacement comes from a group topping itself up (an Auto Scaling group, a MachineSet)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Candidate:
    """A machine the group created, as far as the choice needs it."""

    instance_id: str
    launched_at: datetime
    claimed_for: str | None  # the old machine it already replaces, if any


def choose_replacement(
    old: str, requested_at: datetime, candidates: Sequence[Candidate]
) -> Candidate | None:
    mine = [c for c in candidates if c.claimed_for == old]
    if mine:
        return mine[0]
    free = [c for c in candidates if c.claimed_for is None and c.launched_at >= requested_at]
    return min(free, key=lambda c: (c.launched_at, c.instance_id), default=None)
