"""Release: undo a quarantine (on cancel, or when a ladder ends without replacing the node).

A cordon that was there before the quarantine is a human's and stays. The annotations go last,
so that a crash half-way still knows whose quarantine it was and whether to uncordon.
"""

from __future__ import annotations

from dataclasses import dataclass

from remediator.actions.outcome import Done, Held, Outcome
from remediator.actions.quarantine import (
    ANN_OPERATOR_FENCE,
    ANN_PRIOR_CORDON,
    ANN_REMEDIATION_ID,
    QUARANTINE_ANNOTATIONS,
    QUARANTINE_TAINT,
)
from remediator.errors import NotFoundError
from remediator.fences.marks import ANN_CLUSTER, ANN_STORE
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node, ObjectRef


@dataclass(frozen=True)
class ReleasePlan:
    uncordon: bool
    untaint: bool
    drop_annotations: tuple[str, ...]
    owner_conflict: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.uncordon or self.untaint or self.drop_annotations)

    def describe(self) -> list[str]:
        steps = []
        if self.uncordon:
            steps.append("uncordon")
        if self.untaint:
            steps.append(f"remove taint {QUARANTINE_TAINT.key}")
        if self.drop_annotations:
            steps.append("remove " + ", ".join(self.drop_annotations))
        return steps


def plan_release(node: Node, remediation_id: str) -> ReleasePlan:
    owner = node.annotations.get(ANN_REMEDIATION_ID)
    if owner and owner != remediation_id:
        return ReleasePlan(False, False, (), owner_conflict=owner)
    if owner is None and not node.has_taint(QUARANTINE_TAINT):
        # Never ours (or already released): touching the cordon could undo a human's.
        return ReleasePlan(False, False, ())
    human_cordon = node.annotations.get(ANN_PRIOR_CORDON) == "true"
    if ANN_OPERATOR_FENCE in node.annotations:
        # An operator's fence stands under the remediation's: only the remediation's marks go.
        mine = tuple(
            k
            for k in QUARANTINE_ANNOTATIONS
            if k in node.annotations and k not in (ANN_STORE, ANN_CLUSTER)
        )
        return ReleasePlan(False, False, mine)
    return ReleasePlan(
        uncordon=node.unschedulable and not human_cordon,
        untaint=node.has_taint(QUARANTINE_TAINT),
        drop_annotations=tuple(k for k in QUARANTINE_ANNOTATIONS if k in node.annotations),
    )


def release(client: KubeClient, node_name: str, remediation_id: str) -> Outcome:
    try:
        node = client.get_node(node_name)
    except NotFoundError:
        return Done(f"node {node_name} is gone; nothing to release", {"node": node_name})
    plan = plan_release(node, remediation_id)
    facts = {"node": node_name, "steps": plan.describe()}
    if plan.owner_conflict:
        return Held(
            f"node {node_name} is quarantined by another remediation ({plan.owner_conflict})",
            {**facts, "owner": plan.owner_conflict},
        )
    if plan.empty:
        return Done(f"node {node_name} is not quarantined", facts)
    if plan.uncordon:
        node = client.uncordon(node_name)
    if plan.untaint:
        node = client.remove_taint(node_name, QUARANTINE_TAINT.key, QUARANTINE_TAINT.effect)
    if plan.drop_annotations:
        node = client.set_node_annotations(node_name, dict.fromkeys(plan.drop_annotations))
    client.create_event(
        ObjectRef.of_node(node),
        "RemediatorRelease",
        f"Quarantine of remediation {remediation_id} lifted: {', '.join(plan.describe())}",
    )
    return Done(f"released {node_name}: {', '.join(plan.describe())}", facts)
