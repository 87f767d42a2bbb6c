"""The grace: every workload on the node gets its notice at the start, on one clock.

A pod that declares the checkpoint handshake (annotation `remediator.io/checkpoint-handshake:
"true"`) is asked to save its state: we set `remediator.io/checkpoint-requested` (once, with the
remediation's request time, and `…/checkpoint-deadline`) and it answers with
`remediator.io/checkpoint-done`; as soon as it answers, or its clock runs out, it is evicted with
whatever is left of that clock. Every other pod is evicted (SIGTERM) at once. A pod's clock is its
own `terminationGracePeriodSeconds` (Kubernetes' default 30 s when unset) held within the policy's
`min_grace`/`max_grace`, and it starts when the step starts: the checkpoint and the SIGTERM grace
are never added together. The step ends when no handshake pod is still saving; the drain after it
waits for the pods to be gone and evicts what a budget refused, with the rest of the same clock.
The engine owns the start time, so a restart does not extend anyone's grace.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from remediator.actions.drain import Drainer
from remediator.actions.outcome import Done, Outcome, Waiting
from remediator.actions.pods import eviction_facts, workloads
from remediator.errors import NotFoundError
from remediator.kube.client import KubeClient
from remediator.kube.objects import EvictionOutcome, EvictionResult, ObjectRef, Pod, format_time

ANN_HANDSHAKE = "remediator.io/checkpoint-handshake"
ANN_REQUESTED = "remediator.io/checkpoint-requested"
ANN_DEADLINE = "remediator.io/checkpoint-deadline"
ANN_DONE = "remediator.io/checkpoint-done"
KUBERNETES_DEFAULT_GRACE = 30
# Answers and pod changes wake the step through the engine's watch; this is only the fallback.
POLL_SECONDS = 5.0


def declares_handshake(pod: Pod) -> bool:
    return pod.annotations.get(ANN_HANDSHAKE, "").strip().lower() == "true"


def pod_grace(pod: Pod, min_grace: float, max_grace: float) -> float:
    """The pod's own terminationGracePeriodSeconds, held within the policy's bounds."""
    own = pod.termination_grace_seconds
    wanted = KUBERNETES_DEFAULT_GRACE if own is None else own
    return max(min_grace, min(max_grace, float(wanted)))


def rest_of_clock(
    pod: Pod, started_at: datetime, now: datetime, min_grace: float, max_grace: float
) -> int:
    """The grace an eviction sent now carries: what is left of the pod's clock, at least 1 s
    (the API server's own minimum for a graceful delete)."""
    elapsed = (now - started_at).total_seconds()
    return max(1, math.ceil(pod_grace(pod, min_grace, max_grace) - elapsed))


@dataclass(frozen=True)
class GracePlan:
    ask: tuple[Pod, ...]
    evict: tuple[tuple[Pod, int], ...]
    answered: tuple[str, ...]
    saving: tuple[str, ...]
    expired: tuple[str, ...]
    next_deadline_seconds: float | None

    @property
    def finished(self) -> bool:
        return not self.saving


def plan_grace(
    pods: Iterable[Pod],
    started_at: datetime,
    now: datetime,
    min_grace: float,
    max_grace: float,
) -> GracePlan:
    """Who is asked, who gets SIGTERM now and with what grace, who is still saving."""
    elapsed = (now - started_at).total_seconds()
    ask: list[Pod] = []
    evict: list[tuple[Pod, int]] = []
    answered: list[str] = []
    saving: list[str] = []
    expired: list[str] = []
    remaining: list[float] = []
    for pod in workloads(pods):
        clock = rest_of_clock(pod, started_at, now, min_grace, max_grace)
        if not declares_handshake(pod):
            evict.append((pod, clock))
            continue
        left = pod_grace(pod, min_grace, max_grace) - elapsed
        if ANN_DONE in pod.annotations:
            answered.append(pod.key)
            evict.append((pod, clock))
        elif left <= 0:
            expired.append(pod.key)
            evict.append((pod, clock))
        else:
            saving.append(pod.key)
            remaining.append(left)
            if ANN_REQUESTED not in pod.annotations:
                ask.append(pod)
    return GracePlan(
        tuple(ask),
        tuple(evict),
        tuple(sorted(answered)),
        tuple(sorted(saving)),
        tuple(sorted(expired)),
        min(remaining) if remaining else None,
    )


def _whose(node: str, remediated: str | None) -> str:
    if remediated is None or remediated == node:
        return f"Node {node} is being remediated"
    return f"Node {remediated}, where this pod's gang also runs, is being remediated"


def give_notice(
    client: KubeClient,
    drainer: Drainer,
    node: str,
    *,
    started_at: datetime,
    min_grace: float,
    max_grace: float,
    now: datetime,
    pods: Iterable[Pod] | None = None,
    remediated: str | None = None,
) -> Outcome:
    """One round of the grace step (idempotent): ask, evict, report. `pods`: only these pods
    of the node (a gang's, on another tray of its clique) instead of all of them; their notice
    then names `remediated`, the faulty tray, not the tray they run on."""
    on_node = client.list_pods_on_node(node)
    if pods is not None:
        keys = {p.key for p in pods}
        on_node = [p for p in on_node if p.key in keys]
    plan = plan_grace(on_node, started_at, now, min_grace, max_grace)
    stamp = format_time(started_at)
    asked: list[str] = []
    gone: set[str] = set()
    for pod in plan.ask:
        seconds = pod_grace(pod, min_grace, max_grace)
        deadline = format_time(started_at + timedelta(seconds=seconds))
        try:
            client.set_pod_annotations(
                pod.namespace, pod.name, {ANN_REQUESTED: stamp, ANN_DEADLINE: deadline}
            )
        except NotFoundError:
            # It ended between the list and the patch: nothing is left to save, and its absence
            # must not fail the whole remediation.
            gone.add(pod.key)
            continue
        asked.append(pod.key)
        client.create_event(
            ObjectRef.of_pod(pod),
            "CheckpointRequested",
            f"{_whose(node, remediated)}: save a checkpoint by {deadline} "
            f"({seconds:.0f}s) and set the {ANN_DONE} annotation; the pod is evicted then",
            "Warning",
        )
    outcomes = drainer.evict(node, plan.evict) if plan.evict else {}
    saving = [key for key in plan.saving if key not in gone]
    facts: dict[str, Any] = {
        "node": node,
        "requested_at": stamp,
        "asked": sorted(asked),
        "answered": list(plan.answered),
        "pending": saving if saving else list(plan.expired),
        "pods": _pod_facts(plan.evict, outcomes, now),
    }
    unsent = [pod for pod, _ in plan.evict if _unsent(outcomes.get(pod.key))]
    trouble = drainer.api_backoff(node, unsent)
    if trouble is not None:
        # A notice the API turned away is not given: retry it once the API allows (the drainer
        # keeps each pod's Retry-After) rather than end the step and let the drain send it late.
        message, wait = trouble
        return Waiting(
            f"Kubernetes API unavailable: {message}, retrying; "
            f"{len(unsent)} workload(s) on {node} still to get their notice",
            wait,
            facts,
        )
    if not saving:
        detail = f"every workload on {node} has had its notice"
        if plan.expired:
            detail += f"; {len(plan.expired)} did not checkpoint within their grace: " + ", ".join(
                plan.expired
            )
        return Done(detail, facts)
    wait = min(POLL_SECONDS, plan.next_deadline_seconds or POLL_SECONDS)
    return Waiting(f"waiting for {len(saving)} workload(s) to checkpoint", wait, facts)


def _unsent(outcome: EvictionOutcome | None) -> bool:
    """Not asked this round (backing off) or turned away by the API itself."""
    return outcome is None or outcome.result is EvictionResult.API_UNAVAILABLE


def _pod_facts(
    evicted: Iterable[tuple[Pod, int]], outcomes: Mapping[str, EvictionOutcome], now: datetime
) -> list[dict[str, Any]]:
    """Per pod, for the console's pod table: SIGTERM sent (with its grace), or refused."""
    rows: list[dict[str, Any]] = []
    for pod, grace in evicted:
        outcome = outcomes.get(pod.key)
        if outcome is None:
            rows.append({"pod": pod.key, "state": "blocked", "message": "backing off"})
        elif outcome.result is EvictionResult.EVICTED:
            rows.append(
                {
                    "pod": pod.key,
                    "state": "evicted",
                    "sigterm_at": format_time(now),
                    "grace_seconds": grace,
                    **eviction_facts(pod),
                }
            )
        elif outcome.result is EvictionResult.NOT_FOUND:
            rows.append({"pod": pod.key, "state": "gone"})
        else:
            rows.append(
                {
                    "pod": pod.key,
                    "state": "blocked",
                    "reason": outcome.result.value,
                    "message": outcome.message,
                }
            )
    return rows
