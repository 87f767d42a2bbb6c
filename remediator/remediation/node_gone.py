"""A remediation whose node left the cluster: an Auto Scaling group that replaced the node itself
(capacity came back after a failed launch), a human who deleted its Machine, a scale-down. Nothing
is left to retry, cordon or uncordon, so the remediation ends and stops fencing a budget:

* replaced (succeeded, outcome `replaced`, naming the new node) when its pool brought in a node
  after the request — a node with the same pool label (its group, MachineSet or instance group)
  created after the remediation was, not already named as another remediation's replacement;
* otherwise cancelled with the outcome `node gone` — except a failed remediation whose own
  replacement took the node away (a launch that failed): it stays failed for a human.

Queued ones are closed by the intake (`node … has left the cluster`); one replacing or verifying
is left to its provider operation, whose own old node is expected to go (validating too: a
new machine is on trial in its place), and so is one held or failed after its own replacement
took the node (#38: ending it released the machine that had failed validation). An empty node
list is never taken to mean every node left."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from remediator.errors import ConflictError, IllegalTransition
from remediator.kube.objects import Node
from remediator.model.states import State
from remediator.remediation.journal import log_transition
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import Repository

log = logging.getLogger(__name__)

NODE_GONE = "node gone"
# States whose node may rightly be gone: the replacement removed it (a new machine is being
# validated in its place).
REPLACEMENT_STATES = frozenset({State.REPLACING, State.VALIDATING, State.VERIFYING})
# Closed by the intake, before any step ran.
LEFT_TO_INTAKE = frozenset({State.QUEUED})


def successor(
    record: RemediationRecord, nodes: Sequence[Node], pool_label: str, claimed: frozenset[str]
) -> Node | None:
    """The first Ready node of the remediation's pool that joined after the request and is
    nobody else's replacement; None when the pool brought none in (or the pool is not known).
    A node that never turned Ready replaced nothing: it is often the failed launch itself."""
    if not record.pool:
        return None
    joined = [
        n
        for n in nodes
        if n.labels.get(pool_label) == record.pool
        and n.ready
        and n.created_at is not None
        and n.created_at > record.created_at
        and n.name != record.node
        and n.name not in claimed
    ]
    return min(joined, key=lambda n: (n.created_at or record.created_at, n.name), default=None)


def gone_ones(
    records: Sequence[RemediationRecord], present: frozenset[str]
) -> list[RemediationRecord]:
    """The remediations to end: their node is not among `present` (and `present` is a real
    list: an empty one says nothing)."""
    if not present:
        return []
    return [
        r
        for r in records
        if r.node not in present
        and r.state not in REPLACEMENT_STATES | LEFT_TO_INTAKE
        and not replaced_by_itself(r)
    ]


def replaced_by_itself(record: RemediationRecord) -> bool:
    """Its own replacement took the node away (a new machine is named, or an operation was
    granted): held or failed after it, the remediation waits for a human, fenced (its failed
    machine included); its node being gone is what it did, not news."""
    return bool(record.new_node or record.replacement_operation_id)


def end_gone(
    repository: Repository,
    record: RemediationRecord,
    nodes: Sequence[Node],
    pool_label: str,
    actor: str,
) -> RemediationRecord | None:
    """End one remediation whose node is gone; None when it moved meanwhile."""
    claimed = frozenset(
        r.new_node
        for r in repository.list(RemediationFilter(created_from=record.created_at), limit=500).rows
        if r.new_node
    )
    found = successor(record, nodes, pool_label, claimed)
    if found is None and record.state is State.FAILED and _replacement_failed(repository, record):
        # Its replacement took the old node away and then failed (a launch that never came
        # up): the node is gone by our own hand, and the failure stays for a human to see.
        return None
    if found is not None:
        target, outcome = State.SUCCEEDED, "replaced"
        reason = (
            f"node {record.node} left the cluster and its pool {record.pool} replaced it with "
            f"{found.name}, which joined after the request"
        )
        fields: dict[str, object] = {"outcome": outcome, "new_node": found.name}
        detail: dict[str, object] = {"reason": reason, "new_node": found.name}
    else:
        target, outcome = State.CANCELLED, NODE_GONE
        reason = (
            f"node {record.node} left the cluster and no node of its pool "
            f"{record.pool or '(unknown)'} joined after the request: nothing left to remediate"
        )
        fields = {"outcome": outcome, "hold_reason": reason}
        detail = {"reason": reason}
    try:
        after = repository.transition(
            record.id,
            record.state,
            target,
            action="node_replaced" if found is not None else "node_gone",
            actor=actor,
            detail=detail,
            expected_version=record.version,
            **fields,
        )
    except (ConflictError, IllegalTransition) as exc:
        log.info("remediation moved meanwhile: %s", exc, extra={"node": record.node})
        return None
    log_transition(
        record.state,
        after,
        action="node_replaced" if found is not None else "node_gone",
        detail=detail,
        seconds_in_state=max(0.0, (after.updated_at - record.updated_at).total_seconds()),
        actor=actor,
    )
    return after


def _replacement_failed(repository: Repository, record: RemediationRecord) -> bool:
    """Whether the remediation failed in its replacement (the planner's `replacement_failed`:
    the operation id is cleared then, so a retry asks for a new one; the timeline keeps it)."""
    full = repository.get(record.id)
    events = full.events if full is not None else ()
    return bool(events) and events[-1].action == "replacement_failed"


def end_all_gone(
    repository: Repository, nodes: Sequence[Node], pool_label: str, actor: str
) -> list[RemediationRecord]:
    """Every open or failed remediation whose node has left, ended (see the module docstring)."""
    failed = repository.list(RemediationFilter(states=frozenset({State.FAILED})), limit=500).rows
    candidates = gone_ones([*repository.list_open(), *failed], frozenset(n.name for n in nodes))
    ended = [end_gone(repository, record, nodes, pool_label, actor) for record in candidates]
    return [r for r in ended if r is not None]
