"""The trays a clique- or domain-scoped remediation holds (policy/scope.py): read back from its
`detected` entry (scope and unit) and the nodes' clique labels now, so that fencing covers every
tray of the unit in this one remediation and no tray of any other."""

from __future__ import annotations

from remediator.model.topology import CLIQUE_LABEL, build_topology
from remediator.remediation.steps.context import StepContext
from remediator.store.records import RemediationRecord


def scope_of(record: RemediationRecord) -> tuple[str, str] | None:
    """(scope, unit) recorded when the remediation was opened; None for a per-node one."""
    for event in record.events:
        scope, unit = event.detail.get("scope"), event.detail.get("domain")
        if scope in ("clique", "domain") and isinstance(unit, str):
            return str(scope), unit
    return None


def members(record: RemediationRecord, ctx: StepContext) -> tuple[str, ...]:
    """Every tray of the remediation's unit, its own node first; just the node when per node."""
    scoped = scope_of(record)
    if scoped is None:
        return (record.node,)
    scope, unit = scoped
    nodes = ctx.kube.list_nodes(label_selector=CLIQUE_LABEL)
    topology = build_topology({n.name: n.labels for n in nodes})
    if scope == "clique":
        found = [n for n, p in topology.placements.items() if p.clique.label == unit]
    else:
        domain = topology.domains.get(unit)
        found = list(domain.nodes) if domain is not None else []
    return (record.node, *sorted(n for n in found if n != record.node))
