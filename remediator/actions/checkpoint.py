"""Checkpoint: ask every workload on the node to save its state before the drain.

The handshake is two pod annotations: we set `remediator.io/checkpoint-requested` (once, with the
remediation's request time, so that a second run asks nobody twice) and the workload answers with
`remediator.io/checkpoint-done`. The step ends when every workload answered or the policy's grace
has run out since the request; the engine owns the request time, so a restart does not extend it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from remediator.actions.outcome import Done, Outcome, Waiting
from remediator.actions.pods import workloads
from remediator.errors import NotFoundError
from remediator.kube.client import KubeClient
from remediator.kube.objects import ObjectRef, Pod, format_time

ANN_REQUESTED = "remediator.io/checkpoint-requested"
ANN_DONE = "remediator.io/checkpoint-done"
POLL_SECONDS = 2.0


@dataclass(frozen=True)
class CheckpointPlan:
    ask: tuple[Pod, ...]
    answered: tuple[str, ...]
    pending: tuple[str, ...]
    remaining_seconds: float

    @property
    def finished(self) -> bool:
        return not self.pending or self.remaining_seconds <= 0


def plan_checkpoint(
    pods: Iterable[Pod], requested_at: datetime, grace_seconds: float, now: datetime
) -> CheckpointPlan:
    work = workloads(pods)
    answered = tuple(sorted(p.key for p in work if ANN_DONE in p.annotations))
    pending = tuple(sorted(p.key for p in work if ANN_DONE not in p.annotations))
    ask = tuple(p for p in work if ANN_REQUESTED not in p.annotations)
    remaining = grace_seconds - (now - requested_at).total_seconds()
    return CheckpointPlan(ask, answered, pending, remaining)


def request_checkpoints(
    client: KubeClient,
    node: str,
    *,
    requested_at: datetime,
    grace_seconds: float,
    now: datetime,
) -> Outcome:
    plan = plan_checkpoint(client.list_pods_on_node(node), requested_at, grace_seconds, now)
    stamp = format_time(requested_at)
    asked: list[str] = []
    gone: set[str] = set()
    for pod in plan.ask:
        try:
            client.set_pod_annotations(pod.namespace, pod.name, {ANN_REQUESTED: stamp})
        except NotFoundError:
            # It ended between the list and the patch: nothing is left to save, and its absence
            # must not fail the whole remediation.
            gone.add(pod.key)
            continue
        asked.append(pod.key)
        client.create_event(
            ObjectRef.of_pod(pod),
            "CheckpointRequested",
            f"Node {node} is being remediated: save a checkpoint within {grace_seconds:.0f}s "
            f"and set the {ANN_DONE} annotation",
            "Warning",
        )
    pending = [key for key in plan.pending if key not in gone]
    facts = {
        "node": node,
        "requested_at": stamp,
        "asked": sorted(asked),
        "answered": list(plan.answered),
        "pending": pending,
    }
    if not pending:
        return Done(f"all {len(plan.answered)} workload(s) on {node} checkpointed", facts)
    if plan.remaining_seconds <= 0:
        return Done(
            f"checkpoint grace of {grace_seconds:.0f}s ran out; "
            f"{len(pending)} workload(s) did not answer: {', '.join(pending)}",
            facts,
        )
    return Waiting(
        f"waiting for {len(pending)} workload(s) to checkpoint",
        min(POLL_SECONDS, plan.remaining_seconds),
        facts,
    )
