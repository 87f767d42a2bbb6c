"""Which decisions may act now. Pure: the caller passes the cluster state, the breaker state and
`now`, and persists the breaker state that comes back. Budgets exist so a bad signal source or a
bad policy can take out a few nodes, never a pool or the cluster."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import partial
from typing import Generic, Protocol, TypeVar

from remediator.policy.domains_out import DomainsOut
from remediator.policy.durations import format_duration
from remediator.policy.schema import GlobalSettings, Limit


class Candidate(Protocol):
    """What the budgets read of a decision (a fresh one, or a queued remediation's)."""

    @property
    def node(self) -> str: ...
    @property
    def pool(self) -> str | None: ...
    @property
    def policy(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def disruptive(self) -> bool: ...


C = TypeVar("C", bound=Candidate)


class HoldCause(StrEnum):
    """Why a decision waits; a budget's hold may cordon the node, the others never act."""

    BUDGET = "budget"
    BREAKER = "breaker"
    PAUSE = "pause"
    # A planned ladder waits for its chosen moment (policy/planned.py); not a budget's hold.
    PLANNED = "planned"


@dataclass(frozen=True)
class ClusterState:
    """`unhealthy` holds, per pool, the nodes unhealthy or under remediation right now; `known`
    the nodes the cluster has (None: not known, every node counts)."""

    nodes_per_pool: Mapping[str, int]
    unhealthy: Mapping[str, frozenset[str]] = field(default_factory=dict)
    open_remediations: int = 0
    known: frozenset[str] | None = None
    # node → its NVLink domain (model/topology.py), for nodes that have one: a domain out of
    # service is one unit to the budgets and one fault to the breaker, whatever its tray count.
    domains: Mapping[str, str] = field(default_factory=dict)
    # pool → the domains a domain-scope remediation holds now (`max_domains_out`): a tray
    # NotReady on its own does not make its domain one of ours to count.
    domains_out: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # pool → domain → its trays fenced by tray (and clique) remediations acting now: the domain
    # is out only past its own budget (`max_unhealthy.per_domain`; policy/domains_out.py).
    fenced_trays: Mapping[str, Mapping[str, frozenset[str]]] = field(default_factory=dict)
    # Policies of `scope: domain`: admitting one of their decisions takes its domain out.
    domain_policies: frozenset[str] = frozenset()

    def unit(self, node: str) -> str:
        """What the budgets and the breaker count `node` as: itself, or its domain."""
        domain = self.domains.get(node)
        return node if domain is None else DOMAIN_UNIT + domain


# Prefix of a domain's unit; a Kubernetes node name cannot contain ':'.
DOMAIN_UNIT = "domain:"


@dataclass(frozen=True)
class BreakerState:
    """Once tripped it stays tripped: only a human resets it (by passing a fresh BreakerState)."""

    tripped: bool = False
    tripped_at: datetime | None = None
    reason: str | None = None
    faults: tuple[tuple[str, datetime], ...] = ()  # (node, first seen) within the window


@dataclass(frozen=True, slots=True)
class Held(Generic[C]):
    decision: C
    reason: str
    cause: HoldCause = HoldCause.BUDGET


@dataclass(frozen=True)
class Admission(Generic[C]):
    admitted: tuple[C, ...]
    held: tuple[Held[C], ...]
    breaker: BreakerState


def limit_for(limit: Limit, total: int) -> int | None:
    """The stricter of count and percent. A percent is floored at `min` (at least 1), so it
    never rounds a non-empty pool down to zero and a small cluster still gets `min` nodes."""
    bounds = []
    if limit.count is not None:
        bounds.append(limit.count)
    if limit.percent is not None:
        floor = max(1, limit.min or 0)
        bounds.append(max(floor, math.floor(total * limit.percent / 100)) if total else 0)
    return min(bounds) if bounds else None


def admit(
    decisions: Iterable[C],
    cluster: ClusterState,
    settings: GlobalSettings,
    breaker: BreakerState,
    now: datetime,
    *,
    counted: frozenset[str] = frozenset(),
) -> Admission[C]:
    """Admit in priority order, then node name. Notify-only decisions take nothing out of service,
    so they neither use budget nor count as faults; the breaker stops them too, since a storm
    means the signals themselves are suspect. Nodes in `counted` (queued remediations, counted
    when they were first decided) are never counted as new faults again."""
    ordered = sorted(decisions, key=lambda d: (-d.priority, d.node, d.policy))
    fleet = sum(cluster.nodes_per_pool.values())
    breaker = _advance_breaker(ordered, settings, breaker, now, fleet, cluster, counted)
    if breaker.tripped:
        reason = f"storm breaker tripped: {breaker.reason}"
        return Admission((), tuple(Held(d, reason, HoldCause.BREAKER) for d in ordered), breaker)

    unhealthy = {
        pool: {cluster.unit(n) for n in nodes} for pool, nodes in cluster.unhealthy.items()
    }
    racks = DomainsOut.start(
        cluster.domains,
        partial(limit_for, settings.max_unhealthy.per_domain),
        cluster.domains_out,
        cluster.fenced_trays,
    )
    total_nodes = sum(cluster.nodes_per_pool.values())
    cluster_cap = limit_for(settings.max_unhealthy.cluster, total_nodes)
    running = cluster.open_remediations
    admitted: list[C] = []
    held: list[Held[C]] = []
    for decision in ordered:
        if not decision.disruptive:
            admitted.append(decision)
            continue
        if running + 1 > settings.max_concurrent:
            held.append(Held(decision, f"max concurrent remediations ({settings.max_concurrent})"))
            continue
        pool = decision.pool or ""
        unit = cluster.unit(decision.node)
        in_pool = unhealthy.get(pool, set())
        pool_cap = limit_for(settings.max_unhealthy.per_pool, cluster.nodes_per_pool.get(pool, 0))
        after_pool = len(in_pool | {unit})
        if pool_cap is not None and after_pool > pool_cap:
            held.append(Held(decision, f"max unhealthy in pool {pool or '(none)'} ({pool_cap})"))
            continue
        whole = decision.policy in cluster.domain_policies
        taken = racks.takes_out(pool, decision.node, whole)
        if taken is not None and len(racks.out(pool)) >= settings.max_domains_out:
            held.append(
                Held(
                    decision,
                    f"max domains out in pool {pool or '(none)'} ({settings.max_domains_out})",
                )
            )
            continue
        everywhere = set().union(*unhealthy.values()) if unhealthy else set()
        if cluster_cap is not None and len(everywhere | {unit}) > cluster_cap:
            held.append(Held(decision, f"max unhealthy in cluster ({cluster_cap})"))
            continue
        unhealthy.setdefault(pool, set()).add(unit)
        racks.take(pool, decision.node, whole)
        running += 1
        admitted.append(decision)
    return Admission(tuple(admitted), tuple(held), breaker)


def breaker_limit(settings: GlobalSettings, fleet: int) -> int:
    """How many distinct nodes newly faulted within the window trip the breaker."""
    return max(1, limit_for(settings.storm_breaker.max_new_faults, fleet) or 1)


def window_base(fleet: int, known: frozenset[str] | None, faulted: Iterable[str]) -> int:
    """Every node present during the window: today's nodes and the faulted ones that have left
    since (replaced nodes and their replacements are both real nodes of the window), so the
    breaker's figure never exceeds 100%. Without an inventory, at least the faulted nodes."""
    faulted = set(faulted)
    if known is None:
        return max(fleet, len(faulted))
    return fleet + len(faulted - known)


def _advance_breaker(
    ordered: list[C],
    settings: GlobalSettings,
    breaker: BreakerState,
    now: datetime,
    fleet: int,
    cluster: ClusterState,
    counted: frozenset[str],
) -> BreakerState:
    """Faults are counted by unit: 18 trays of one rack going down together are one fault of
    their domain, while trays of many domains are as many faults."""
    config = settings.storm_breaker
    if breaker.tripped or not config.enabled:
        return breaker
    since = now - config.window
    faults = {node: at for node, at in breaker.faults if at > since}
    known = cluster.known
    for decision in ordered:
        node = decision.node
        unit = cluster.unit(node)
        if not decision.disruptive or unit in faults or node in counted:
            continue
        if known is not None and node not in known:
            continue  # a node the cluster does not have is nobody's fault
        faults[unit] = now
    kept = tuple(sorted(faults.items(), key=lambda item: (item[1], item[0])))
    # The fleet in units too, so that a percent of it means the same with racks as without.
    units = fleet - len(cluster.domains) + len(set(cluster.domains.values()))
    base = window_base(units, known, (u for u in faults if not u.startswith(DOMAIN_UNIT)))
    limit = breaker_limit(settings, base)
    if len(kept) >= limit:
        reason = (
            f"{len(kept)} of {base} {'nodes and NVLink domains' if cluster.domains else 'nodes'}"
            " newly faulted within "
            f"{format_duration(config.window)} (limit {limit}); a human must reset it"
        )
        return BreakerState(tripped=True, tripped_at=now, reason=reason, faults=kept)
    return BreakerState(faults=kept)
