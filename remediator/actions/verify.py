"""Verify: the remediation only counts once the cluster shows it: the replacement is Ready and
schedulable and the old node has left."""

from __future__ import annotations

from datetime import datetime

from remediator.actions.outcome import Done, Failed, Outcome, Waiting
from remediator.errors import NotFoundError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.model.topology import SPARE_LABEL

POLL_SECONDS = 2.0
# Lifecycle taints (not-ready, unreachable, unschedulable, …) and our own quarantine; a pool's
# permanent dedication taints (e.g. nvidia.com/gpu) are how the node should look.
FENCING_TAINT_PREFIXES = (
    "node.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
    "remediator.io/",
)


def node_problems(node: Node | None, name: str) -> list[str]:
    """Why a node is not (yet) a healthy member of the pool; empty when it is."""
    if node is None:
        return [f"{name} has not joined the cluster"]
    problems = []
    if not node.ready:
        cond = node.condition("Ready")
        detail = f" ({cond.reason})" if cond and cond.reason else ""
        problems.append(f"{name} is not Ready{detail}")
    if node.unschedulable:
        problems.append(f"{name} is cordoned")
    # A replaced NVL72 tray may come back as its rack's spare: labelled and tainted so, on
    # purpose (model/topology.py), which is how it should look.
    spare = node.labels.get(SPARE_LABEL) == "true"
    blocking = [
        t.key
        for t in node.taints
        if t.key.startswith(FENCING_TAINT_PREFIXES) and not (spare and t.key == SPARE_LABEL)
    ]
    if blocking:
        problems.append(f"{name} has taints {', '.join(blocking)}")
    return problems


def _find(client: KubeClient, name: str) -> Node | None:
    try:
        return client.get_node(name)
    except NotFoundError:
        return None


def _judge(
    problems: list[str],
    done: str,
    started_at: datetime,
    now: datetime,
    timeout: float,
    facts: dict[str, object],
) -> Outcome:
    if not problems:
        return Done(done, facts)
    facts = {**facts, "problems": problems}
    if (now - started_at).total_seconds() > timeout:
        return Failed(f"not verified after {timeout:.0f}s: {'; '.join(problems)}", facts)
    return Waiting("; ".join(problems), POLL_SECONDS, facts)


def verify_replacement(
    client: KubeClient,
    *,
    old_node: str,
    new_node: str,
    started_at: datetime,
    now: datetime,
    timeout_seconds: float = 600.0,
) -> Outcome:
    problems = node_problems(_find(client, new_node), new_node)
    # A provider that recreates a machine under its own name (GCE recreateInstances) reports the
    # node as its own replacement, and only once the Node registered again.
    if new_node != old_node and _find(client, old_node) is not None:
        problems.append(f"{old_node} is still in the cluster")
    facts: dict[str, object] = {"old_node": old_node, "new_node": new_node}
    return _judge(
        problems,
        f"{new_node} is Ready and schedulable"
        + ("" if new_node == old_node else f"; {old_node} is gone"),
        started_at,
        now,
        timeout_seconds,
        facts,
    )
