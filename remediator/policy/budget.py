"""Which decisions may act now. Pure: the caller passes the cluster state, the breaker state and
`now`, and persists the breaker state that comes back. Budgets exist so a bad signal source or a
bad policy can take out a few nodes, never a pool or the cluster."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from remediator.policy.durations import format_duration
from remediator.policy.evaluate import Decision
from remediator.policy.schema import GlobalSettings, Limit


@dataclass(frozen=True)
class ClusterState:
    """`unhealthy` holds, per pool, the nodes unhealthy or under remediation right now."""

    nodes_per_pool: Mapping[str, int]
    unhealthy: Mapping[str, frozenset[str]] = field(default_factory=dict)
    open_remediations: int = 0


@dataclass(frozen=True)
class BreakerState:
    """Once tripped it stays tripped: only a human resets it (by passing a fresh BreakerState)."""

    tripped: bool = False
    tripped_at: datetime | None = None
    reason: str | None = None
    faults: tuple[tuple[str, datetime], ...] = ()  # (node, first seen) within the window


@dataclass(frozen=True, slots=True)
class Held:
    decision: Decision
    reason: str


@dataclass(frozen=True)
class Admission:
    admitted: tuple[Decision, ...]
    held: tuple[Held, ...]
    breaker: BreakerState


def limit_for(limit: Limit, total: int) -> int | None:
    """The stricter of count and percent. A percent never rounds a non-empty pool down to zero:
    10% of a 5-node pool still lets one node be remediated."""
    bounds = []
    if limit.count is not None:
        bounds.append(limit.count)
    if limit.percent is not None:
        bounds.append(max(1, math.floor(total * limit.percent / 100)) if total else 0)
    return min(bounds) if bounds else None


def admit(
    decisions: Iterable[Decision],
    cluster: ClusterState,
    settings: GlobalSettings,
    breaker: BreakerState,
    now: datetime,
) -> Admission:
    """Admit in priority order, then node name. Notify-only decisions take nothing out of service,
    so they neither use budget nor count as faults; the breaker stops them too, since a storm
    means the signals themselves are suspect."""
    ordered = sorted(decisions, key=lambda d: (-d.priority, d.node, d.policy))
    breaker = _advance_breaker(ordered, settings, breaker, now)
    if breaker.tripped:
        reason = f"storm breaker tripped: {breaker.reason}"
        return Admission((), tuple(Held(d, reason) for d in ordered), breaker)

    unhealthy = {pool: set(nodes) for pool, nodes in cluster.unhealthy.items()}
    total_nodes = sum(cluster.nodes_per_pool.values())
    cluster_cap = limit_for(settings.max_unhealthy.cluster, total_nodes)
    running = cluster.open_remediations
    admitted: list[Decision] = []
    held: list[Held] = []
    for decision in ordered:
        if not decision.disruptive:
            admitted.append(decision)
            continue
        if running + 1 > settings.max_concurrent:
            held.append(Held(decision, f"max concurrent remediations ({settings.max_concurrent})"))
            continue
        pool = decision.pool or ""
        in_pool = unhealthy.get(pool, set())
        pool_cap = limit_for(settings.max_unhealthy.per_pool, cluster.nodes_per_pool.get(pool, 0))
        after_pool = len(in_pool | {decision.node})
        if pool_cap is not None and after_pool > pool_cap:
            held.append(Held(decision, f"max unhealthy in pool {pool or '(none)'} ({pool_cap})"))
            continue
        everywhere = set().union(*unhealthy.values()) if unhealthy else set()
        if cluster_cap is not None and len(everywhere | {decision.node}) > cluster_cap:
            held.append(Held(decision, f"max unhealthy in cluster ({cluster_cap})"))
            continue
        unhealthy.setdefault(pool, set()).add(decision.node)
        running += 1
        admitted.append(decision)
    return Admission(tuple(admitted), tuple(held), breaker)


def _advance_breaker(
    ordered: list[Decision], settings: GlobalSettings, breaker: BreakerState, now: datetime
) -> BreakerState:
    config = settings.storm_breaker
    if breaker.tripped or not config.enabled:
        return breaker
    since = now - config.window
    faults = {node: at for node, at in breaker.faults if at > since}
    for decision in ordered:
        if decision.disruptive and decision.node not in faults:
            faults[decision.node] = now
    kept = tuple(sorted(faults.items(), key=lambda item: (item[1], item[0])))
    if len(kept) > config.max_new_faults:
        reason = (
            f"{len(kept)} nodes newly faulted within {format_duration(config.window)} "
            f"(limit {config.max_new_faults}); a human must reset it"
        )
        return BreakerState(tripped=True, tripped_at=now, reason=reason, faults=kept)
    return BreakerState(faults=kept)
