"""A scoped policy's quorum (`quorum_percent`, pure): a clique or domain policy acts only when
enough of its unit's trays match in the same cycle. `rack-down` is a rack losing power, so one
tray NotReady is that tray's own fault and goes to the per-node policy, not the whole rack's
replacement (issue 39). A node with no usable clique label is no tray: such a policy never
applies to it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from remediator.model.topology import CLIQUE_LABEL, parse_clique
from remediator.policy.schema import Policy


def unit_of(scope: str, labels: Mapping[str, str]) -> str | None:
    """The clique (its full label) or the domain (its clusterUUID) a node's labels place it in."""
    value = labels.get(CLIQUE_LABEL)
    clique = None if value is None else parse_clique(value)
    if clique is None:
        return None
    return clique.label if scope == "clique" else clique.domain


def short_of_quorum(
    matched: Iterable[tuple[str, str]],
    policies: Mapping[str, Policy],
    labels: Mapping[str, Mapping[str, str]],
) -> set[tuple[str, str]]:
    """The (policy, node) matches to drop: of a policy with a quorum, those whose unit has fewer
    matching trays than `quorum_percent` of its trays, and those of nodes with no unit."""
    wanted = [(p, n) for p, n in matched if policies[p].quorum_percent is not None]
    if not wanted:
        return set()
    units = {(p, n): unit_of(policies[p].scope, labels.get(n, {})) for p, n in wanted}
    found = Counter((p, u) for (p, _n), u in units.items() if u is not None)
    sizes: dict[str, Counter[str | None]] = {}
    short: set[tuple[str, str]] = set()
    for (policy, node), unit in units.items():
        scope = policies[policy].scope
        if scope not in sizes:
            sizes[scope] = Counter(unit_of(scope, node_labels) for node_labels in labels.values())
        share = policies[policy].quorum_percent or 0.0
        if unit is None or found[policy, unit] * 100 < share * sizes[scope][unit]:
            short.add((policy, node))
    return short
