"""What a fault on one tray of an NVLink domain does to the gang jobs across its clique: pure.

A multi-node NVLink job spans the trays of its clique; a tray that falls off breaks it on every
tray. So every pod of each gang with a pod on the faulty tray is notified at once (one grace for
the gang: the existing SIGTERM/checkpoint grace, applied to all of its pods), the faulty tray
alone is drained, and then either a spare tray of the same domain is taken into service (its
spare label and taint removed) while the faulty one goes to replacement, or, with no spare
there, the gangs are released (their pods evicted, so their Jobs reschedule into another
domain). The executor records the plan's decision and reason on the remediation's timeline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from remediator.kube.objects import Pod
from remediator.model.topology import Topology

GANG_LABEL = "remediator.io/gang"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def gang_of(pod: Pod) -> str | None:
    """The gang a pod belongs to: our label, else the Job that owns it (namespaced)."""
    name = pod.labels.get(GANG_LABEL) or pod.labels.get(JOB_NAME_LABEL)
    return None if name is None else f"{pod.namespace}/{name}"


@dataclass(frozen=True)
class TrayPlan:
    tray: str
    domain: str | None
    gangs: tuple[str, ...]
    # Every pod of those gangs, on every tray: notified together, under one grace.
    notify: tuple[Pod, ...]
    decision: Literal["spare", "release", "per_node"]
    spare: str | None
    # The pods evicted so their Jobs reschedule elsewhere (release only).
    release: tuple[Pod, ...]
    reason: str


def plan_tray_fault(
    tray: str,
    topology: Topology,
    pods: Iterable[Pod],
    ready: Mapping[str, bool],
    busy: frozenset[str] = frozenset(),
    taken: str | None = None,
    known_gangs: Iterable[str] = (),
) -> TrayPlan:
    """`ready`: node → Ready; `busy`: nodes out of service for another reason (cordoned, under
    remediation), which are no spare to take; `taken`: the spare this fault already took into
    service (the step runs again after a restart: it takes no second one); `known_gangs`: the
    gangs noticed in an earlier round, whose pods on this tray may be gone by now."""
    live = [p for p in pods if p.deletion_timestamp is None and p.phase in ("Pending", "Running")]
    on_tray = {g for p in live if p.node_name == tray and (g := gang_of(p)) is not None}
    gangs = sorted(on_tray | set(known_gangs))
    notify = tuple(
        sorted(
            (p for p in live if gang_of(p) in gangs),
            key=lambda p: (p.node_name, p.namespace, p.name),
        )
    )
    domain = topology.domain_of(tray)
    if domain is None:
        return TrayPlan(
            tray,
            None,
            tuple(gangs),
            notify,
            "per_node",
            None,
            (),
            f"{tray} has no clique label: remediated per node",
        )
    spares = (
        [taken]
        if taken is not None
        else [
            node
            for node in domain.spares
            if node != tray and ready.get(node, False) and node not in busy
        ]
    )
    if spares:
        spare = spares[0]
        return TrayPlan(
            tray,
            domain.name,
            tuple(gangs),
            notify,
            "spare",
            spare,
            (),
            f"spare tray {spare} of domain {domain.name} taken into service; {tray} goes to "
            "replacement",
        )
    gang_text = ", ".join(gangs) if gangs else "no gang job"
    where = f"rack {domain.rack}" if domain.rack else f"domain {domain.name}"
    return TrayPlan(
        tray,
        domain.name,
        tuple(gangs),
        notify,
        "release",
        None,
        notify,
        f"no spare in {where}: gang released ({gang_text}) to reschedule into another domain "
        f"than {domain.name}",
    )
