"""Quarantine: stop new work landing on a sick node and say why, on the node itself.

Cordon, a `remediator.io/quarantine:NoSchedule` taint (so that it stays fenced even if someone
uncordons by hand), annotations naming the remediation, policy and signal, and an Event for
`kubectl describe node`. The annotations are written first: they record whether the node was
already cordoned before us, which `release` needs to leave a human's cordon in place, and which
must not be lost to a crash between the steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from remediator.actions.outcome import Done, Held, Outcome
from remediator.fences.marks import (
    ANN_CLUSTER,
    ANN_MACHINE_HOLD,
    ANN_OPERATOR_FENCE,
    ANN_REMEDIATION_ID,
    ANN_STORE,
    QUARANTINE_TAINT,
)
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node, ObjectRef

ANN_POLICY = "remediator.io/policy"
ANN_SIGNAL = "remediator.io/signal"
ANN_PRIOR_CORDON = "remediator.io/cordoned-before-quarantine"
# A remediation's marks, dropped by its release. A machine hold's cordon is ours, not a human's,
# when a remediation quarantines the node later; an operator's fence (ANN_OPERATOR_FENCE) is
# not the remediation's to lift and stays.
QUARANTINE_ANNOTATIONS = (
    ANN_REMEDIATION_ID,
    ANN_POLICY,
    ANN_SIGNAL,
    ANN_PRIOR_CORDON,
    ANN_MACHINE_HOLD,
    ANN_STORE,
    ANN_CLUSTER,
)
__all__ = [
    "ANN_MACHINE_HOLD",
    "ANN_OPERATOR_FENCE",
    "ANN_REMEDIATION_ID",
    "QUARANTINE_ANNOTATIONS",
    "QUARANTINE_TAINT",
    "Why",
    "quarantine",
]


@dataclass(frozen=True)
class Why:
    """Which remediation fences the node, under which policy, because of which signal; `marks`
    name the store and cluster that wrote it (fences/marks.py FenceIdentity)."""

    remediation_id: str
    policy: str
    signal: str
    marks: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class QuarantinePlan:
    annotations: dict[str, str]
    cordon: bool
    taint: bool
    owner_conflict: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.annotations or self.cordon or self.taint)

    def describe(self) -> list[str]:
        steps = []
        if self.annotations:
            steps.append("annotate " + ", ".join(sorted(self.annotations)))
        if self.cordon:
            steps.append("cordon")
        if self.taint:
            steps.append(f"taint {QUARANTINE_TAINT.key}={QUARANTINE_TAINT.value}:NoSchedule")
        return steps


def plan_quarantine(node: Node, why: Why) -> QuarantinePlan:
    """Only what is still missing, so that running twice changes nothing the second time."""
    owner = node.annotations.get(ANN_REMEDIATION_ID)
    if owner and owner != why.remediation_id:
        return QuarantinePlan({}, False, False, owner_conflict=owner)
    wanted = {
        ANN_REMEDIATION_ID: why.remediation_id,
        ANN_POLICY: why.policy,
        ANN_SIGNAL: why.signal,
        **why.marks,
    }
    if owner is None and node.unschedulable and ANN_MACHINE_HOLD not in node.annotations:
        wanted[ANN_PRIOR_CORDON] = "true"
    missing = {k: v for k, v in wanted.items() if node.annotations.get(k) != v}
    return QuarantinePlan(missing, not node.unschedulable, not node.has_taint(QUARANTINE_TAINT))


def quarantine(client: KubeClient, node_name: str, why: Why, *, dry_run: bool = False) -> Outcome:
    node = client.get_node(node_name)
    plan = plan_quarantine(node, why)
    # The GPUs taken out of service, for the console's GPU-hours lost.
    facts = {"node": node_name, "steps": plan.describe(), "dry_run": dry_run, "gpus": node.gpus}
    if plan.owner_conflict:
        return Held(
            f"node {node_name} is already quarantined by remediation {plan.owner_conflict}",
            {**facts, "owner": plan.owner_conflict},
        )
    if plan.empty:
        return Done(f"node {node_name} already quarantined", facts)
    if dry_run:
        return Done(f"dry run: would {', '.join(plan.describe())} on {node_name}", facts)
    # The owner's annotations land with the cordon or before it, never after: a node we
    # cordoned always names the remediation that must release it.
    if plan.annotations and plan.cordon:
        node = client.annotate_and_cordon(node_name, plan.annotations)
    elif plan.annotations:
        node = client.set_node_annotations(node_name, plan.annotations)
    elif plan.cordon:
        node = client.cordon(node_name)
    if plan.taint:
        node = client.add_taint(node_name, QUARANTINE_TAINT)
    client.create_event(
        ObjectRef.of_node(node),
        "RemediatorQuarantine",
        f"Quarantined by remediation {why.remediation_id} (policy {why.policy}): {why.signal}",
        "Warning",
    )
    return Done(f"quarantined {node_name}: {', '.join(plan.describe())}", facts)
