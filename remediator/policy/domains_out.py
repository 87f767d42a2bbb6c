"""When an NVLink domain (an NVL72 rack) counts as out of service for `max_domains_out` (pure).

A domain is out while a domain-scope remediation holds it, or while more of its trays are
fenced by remediations than its own budget (`max_unhealthy.per_domain`) allows: then its gangs
cannot run there either. One held tray is a tray, not a rack: counting it as its rack kept every
other rack's fault queued (issue 39). Queued remediations take no budget here either (intake's
`cluster_state`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from remediator.model.topology import CLIQUE_LABEL


@dataclass(frozen=True)
class Holding:
    """What one remediation acting now holds: its lead node, pool and policy's scope."""

    node: str
    pool: str
    scope: str


def unit_nodes(
    node: str,
    scope: str,
    domains: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]],
) -> tuple[str, ...]:
    """The trays a remediation of `node` under `scope` fences: its clique's or its domain's, or
    the node alone (per node, or no usable clique label)."""
    domain = domains.get(node)
    if scope == "node" or domain is None:
        return (node,)
    if scope == "clique":
        clique = labels.get(node, {}).get(CLIQUE_LABEL)
        return tuple(n for n in domains if labels.get(n, {}).get(CLIQUE_LABEL) == clique)
    return tuple(n for n, d in domains.items() if d == domain)


def domains_held(
    acting: Iterable[Holding],
    domains: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]],
) -> tuple[dict[str, frozenset[str]], dict[str, dict[str, frozenset[str]]]]:
    """(pool → domains a domain-scope remediation holds, pool → domain → trays fenced by the
    others)."""
    whole: dict[str, set[str]] = {}
    trays: dict[str, dict[str, set[str]]] = {}
    for held in acting:
        domain = domains.get(held.node)
        if domain is None:
            continue
        if held.scope == "domain":
            whole.setdefault(held.pool, set()).add(domain)
            continue
        for tray in unit_nodes(held.node, held.scope, domains, labels):
            trays.setdefault(held.pool, {}).setdefault(domain, set()).add(tray)
    return (
        {pool: frozenset(out) for pool, out in whole.items()},
        {pool: {d: frozenset(t) for d, t in by.items()} for pool, by in trays.items()},
    )


@dataclass
class DomainsOut:
    """The domains out per pool as admission goes on: admitting a domain-scope decision takes
    its domain out; a tray's decision adds the tray, which takes its domain out only past the
    domain's own budget."""

    domains: Mapping[str, str]
    # A domain of n trays → how many of them may be fenced before it is out (None: no limit).
    cap: Callable[[int], int | None]
    whole: dict[str, set[str]] = field(default_factory=dict)
    trays: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    _sizes: Counter[str] = field(default_factory=Counter)

    @classmethod
    def start(
        cls,
        domains: Mapping[str, str],
        cap: Callable[[int], int | None],
        whole: Mapping[str, frozenset[str]],
        trays: Mapping[str, Mapping[str, frozenset[str]]],
    ) -> DomainsOut:
        return cls(
            domains,
            cap,
            {pool: set(out) for pool, out in whole.items()},
            {pool: {d: set(t) for d, t in by.items()} for pool, by in trays.items()},
            Counter(domains.values()),
        )

    def _over(self, domain: str, fenced: int) -> bool:
        allowed = self.cap(self._sizes[domain])
        return allowed is not None and fenced > allowed

    def out(self, pool: str) -> set[str]:
        over = {d for d, t in self.trays.get(pool, {}).items() if self._over(d, len(t))}
        return self.whole.get(pool, set()) | over

    def takes_out(self, pool: str, node: str, whole: bool) -> str | None:
        """The domain admitting this decision would newly take out; None when none."""
        domain = self.domains.get(node)
        if domain is None or domain in self.out(pool):
            return None
        if whole:
            return domain
        fenced = self.trays.get(pool, {}).get(domain, set()) | {node}
        return domain if self._over(domain, len(fenced)) else None

    def take(self, pool: str, node: str, whole: bool) -> None:
        domain = self.domains.get(node)
        if domain is None:
            return
        if whole:
            self.whole.setdefault(pool, set()).add(domain)
        else:
            self.trays.setdefault(pool, {}).setdefault(domain, set()).add(node)
