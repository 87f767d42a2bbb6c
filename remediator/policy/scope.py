"""A policy's `scope`: decisions about trays of one NVLink clique or domain become one decision.

Pure, between evaluate and the budgets: per-node decisions of a `clique` or `domain` policy are
grouped by the clique or domain of their node (model/topology.py) and folded into one decision
whose `members` are every tray of that unit, so that the unit gets one remediation with one
timeline (an NVSwitch fault logged on all 18 trays of a rack, or the rack losing power). A node
without a usable clique label cannot be placed: it keeps its per-node decision, and the reason
says so rather than guessing a domain for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from remediator.model.topology import Topology
from remediator.policy.evaluate import Decision


def unit_of(decision: Decision, topology: Topology) -> tuple[str, tuple[str, ...]] | None:
    """The clique or domain a scoped decision covers, and its nodes; None when per node."""
    if decision.scope == "node":
        return None
    place = topology.placement(decision.node)
    if place is None:
        return None
    if decision.scope == "clique":
        return place.clique.label, topology.clique_of(decision.node)
    return place.domain, topology.domains[place.domain].nodes


def fold_scopes(decisions: Iterable[Decision], topology: Topology) -> tuple[Decision, ...]:
    """One decision per (policy, unit), where the unit's first decision stood; its lead node is
    the first signalled tray by name."""
    out: list[Decision | tuple[str, str]] = []
    groups: dict[tuple[str, str], list[Decision]] = {}
    for decision in decisions:
        unit = unit_of(decision, topology)
        if unit is None:
            if decision.scope != "node":
                decision = dataclasses.replace(
                    decision,
                    members=(decision.node,),
                    reason=f"{decision.reason}; scope {decision.scope}: no clique label, per node",
                )
            out.append(decision)
            continue
        key = (decision.policy, unit[0])
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].append(decision)
    return tuple(
        item if isinstance(item, Decision) else _fold(groups[item], item[1], topology)
        for item in out
    )


def _fold(group: list[Decision], name: str, topology: Topology) -> Decision:
    lead = min(group, key=lambda d: d.node)
    unit = unit_of(lead, topology)
    members = unit[1] if unit is not None else (lead.node,)
    signalled = sorted({d.node for d in group})
    signals = tuple(
        sorted((s for d in group for s in d.signals), key=lambda s: (s.observed_at, s.node))
    )
    trays = (
        f"{len(signalled)} of its {len(members)} trays signalled"
        if len(signalled) > 1
        else f"signalled by {lead.node}"
    )
    return dataclasses.replace(
        lead,
        signals=signals,
        domain=name,
        members=members,
        reason=f"{lead.reason}; scope {lead.scope} {name}: {trays}",
    )
