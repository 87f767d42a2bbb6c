"""The gang side of the grace step on a tray of an NVLink clique (remediation/tray_fault.py).

A tray that falls off breaks the NVLink job across its whole clique, so when the faulty node
has a clique label every pod of the gangs running on it gets the one grace too, on every tray:
handshake pods are asked to checkpoint, the others get their SIGTERM, all on the remediation's
clock. Before any of them is evicted the spare question is settled once: a Ready spare tray of
the same domain is taken into service (its spare label and taint removed), so the Job's new pods
land back in the clique, or, with none, the gang is released to reschedule into another domain.
The decision and its reason go on the timeline with the step's facts. Nodes without a clique
label are untouched by all of this."""

from __future__ import annotations

from typing import Any

from remediator.actions.checkpoint import give_notice
from remediator.actions.outcome import Done, Outcome, Waiting
from remediator.kube.objects import Pod
from remediator.model.topology import CLIQUE_LABEL, SPARE_LABEL, build_topology
from remediator.remediation.steps.context import StepContext
from remediator.remediation.tray_fault import GANG_LABEL, TrayPlan, plan_tray_fault
from remediator.store.records import RemediationRecord

ANN_SPARE_FOR = "remediator.io/spare-taken-for"


def plan(record: RemediationRecord, ctx: StepContext) -> TrayPlan | None:
    """The tray plan of this remediation's node; None when it has no clique or no gang."""
    nodes = ctx.kube.list_nodes(label_selector=CLIQUE_LABEL)
    if not any(n.name == record.node for n in nodes):
        return None
    topology = build_topology({n.name: n.labels for n in nodes})
    place = topology.placement(record.node)
    if place is None:
        return None
    on_tray = [p for p in ctx.kube.list_pods_on_node(record.node) if GANG_LABEL in p.labels]
    # Once the tray's own pods are gone the gangs are known from the timeline: the later rounds
    # of the grace still owe the other trays' pods their eviction.
    known = noticed_gangs(record)
    gangs = {(p.namespace, p.labels[GANG_LABEL]) for p in on_tray} | known
    # The pods the Job creates anew once the old ones are evicted are not the gang this fault
    # broke: only pods older than the step get its notice.
    started = ctx.entered(record)
    pods: dict[str, Pod] = {}
    for namespace, gang in sorted(gangs):
        for pod in ctx.kube.list_pods(namespace, f"{GANG_LABEL}={gang}"):
            if pod.created_at is None or pod.created_at <= started:
                pods[pod.key] = pod
    if not pods:
        return None
    # A spare already taken for this remediation (a restart mid-step) is still its spare.
    taken = [n.name for n in nodes if n.annotations.get(ANN_SPARE_FOR) == str(record.id)]
    ready = {n.name: n.ready for n in nodes}
    busy = frozenset(n.name for n in nodes if n.unschedulable)
    return plan_tray_fault(
        record.node,
        topology,
        pods.values(),
        ready,
        busy,
        taken[0] if taken else None,
        (f"{namespace}/{name}" for namespace, name in known),
    )


def noticed_gangs(record: RemediationRecord) -> set[tuple[str, str]]:
    """(namespace, gang) of the gangs this remediation's grace step has already noticed."""
    found: set[tuple[str, str]] = set()
    for event in record.events:
        gang = event.detail.get("gang")
        if isinstance(gang, dict):
            for key in gang.get("gangs", ()):
                namespace, _, name = str(key).partition("/")
                found.add((namespace, name))
    return found


def take_spare(ctx: StepContext, record: RemediationRecord, spare: str) -> None:
    """Into service: the spare label and taint go; the annotation says for whom (idempotent)."""
    ctx.kube.set_node_annotations(spare, {ANN_SPARE_FOR: str(record.id)})
    ctx.kube.set_node_labels(spare, {SPARE_LABEL: None})
    ctx.kube.remove_taint(spare, SPARE_LABEL, "NoSchedule")


def notify_gang(
    record: RemediationRecord, ctx: StepContext, low: float, high: float, node_outcome: Outcome
) -> Outcome:
    """The node's own notice was given (`node_outcome`); add the gang's on its other trays."""
    tray_plan = plan(record, ctx)
    if tray_plan is None:
        return node_outcome
    if tray_plan.decision == "spare" and tray_plan.spare is not None:
        take_spare(ctx, record, tray_plan.spare)
    started, now = ctx.entered(record), ctx.clock.now()
    waiting: list[Waiting] = []
    others = sorted({p.node_name for p in tray_plan.notify if p.node_name != record.node})
    for tray in others:
        outcome = give_notice(
            ctx.kube,
            ctx.drainer,
            tray,
            started_at=started,
            min_grace=low,
            max_grace=high,
            now=now,
            pods=[p for p in tray_plan.notify if p.node_name == tray],
            remediated=record.node,
        )
        if isinstance(outcome, Waiting):
            waiting.append(outcome)
    facts: dict[str, Any] = {
        **dict(getattr(node_outcome, "facts", {})),
        "gang": {
            "gangs": list(tray_plan.gangs),
            "pods": len(tray_plan.notify),
            "trays": len(others) + 1,
            "decision": tray_plan.decision,
            "spare": tray_plan.spare,
            "reason": tray_plan.reason,
        },
    }
    if isinstance(node_outcome, Waiting):
        return Waiting(node_outcome.reason, node_outcome.retry_after, facts)
    if waiting:
        first = waiting[0]
        return Waiting(
            f"{len(waiting)} tray(s) of the gang still saving: {first.reason}",
            min(w.retry_after for w in waiting),
            facts,
        )
    if isinstance(node_outcome, Done):
        return Done(f"{node_outcome.detail}; gang: {tray_plan.reason}", facts)
    return node_outcome
