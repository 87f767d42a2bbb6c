"""The fleet-wide breaker's decision. Pure: the caller passes the shared fault window (every
taking-part cluster's newly faulted nodes), each cluster's node count and `now`; the answer
says whether the fleet is in a storm. Only a human resets a tripped fleet breaker, so this is
asked only while it is closed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from remediator.policy.budget import limit_for
from remediator.policy.durations import format_duration
from remediator.policy.schema import FleetBreaker


@dataclass(frozen=True)
class FleetFaultSeen:
    cluster: str
    node: str
    at: datetime


@dataclass(frozen=True)
class FleetVerdict:
    trip: bool
    faults: int  # distinct (cluster, node) newly faulted within the window
    base: int  # the fleet's nodes the percent is taken of
    limit: int
    reason: str | None = None


def fleet_verdict(
    config: FleetBreaker,
    faults: Iterable[FleetFaultSeen],
    nodes: Mapping[str, int],
    now: datetime,
) -> FleetVerdict:
    """Trip when `limit` distinct nodes of the fleet newly faulted within the window. The base
    is every taking-part cluster's node count, and at least the faulted nodes (a cluster that
    has not reported its count yet still counts its faults), so the figure never exceeds 100%."""
    since = now - config.window
    seen = {(f.cluster, f.node) for f in faults if since < f.at <= now}
    base = max(sum(max(0, n) for n in nodes.values()), len(seen))
    limit = max(1, limit_for(config.max_new_faults, base) or 1)
    if len(seen) < limit:
        return FleetVerdict(False, len(seen), base, limit)
    clusters = sorted({cluster for cluster, _ in seen})
    reason = (
        f"{len(seen)} of {base} fleet nodes newly faulted within "
        f"{format_duration(config.window)} (limit {limit}) in {len(clusters)} "
        f"cluster{'s' if len(clusters) != 1 else ''} ({', '.join(clusters[:10])}"
        f"{', …' if len(clusters) > 10 else ''}); a human must reset it"
    )
    return FleetVerdict(True, len(seen), base, limit, reason)
