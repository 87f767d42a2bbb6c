"""Replace: ask the node pool for a new node in place of the sick one, and follow the operation.

The request carries the remediation's idempotency key, so asking again after a crash or a retry
returns the same operation instead of a second node. That also makes the provider's answer to the
request the authority on capacity: a pre-check alone could not tell our own, already granted,
replacement from an empty pool. A paused platform is not a refusal: the step waits, holding with
the reason, and asks again until the pause ends.
"""

from __future__ import annotations

from datetime import datetime

from remediator.actions.outcome import Done, Failed, Held, Outcome, Waiting
from remediator.errors import PermanentError
from remediator.providers.base import (
    NodePoolProvider,
    Operation,
    OperationState,
    ReplacementHeld,
    ReplacementPaused,
)

# A pending operation is asked about twice a second: nothing else tells us it finished.
POLL_SECONDS = 0.5
# A paused platform is asked again this often: a pause (`clusterctl move`) lasts minutes, and
# each look reads several objects.
PAUSE_POLL_SECONDS = 5.0


def _facts(op: Operation) -> dict[str, str | None]:
    return {
        **op.detail,
        "operation_id": op.id,
        "pool": op.pool,
        "node": op.node,
        "state": op.state.value,
        "new_node": op.new_node,
        "error": op.error,
    }


def check_capacity(provider: NodePoolProvider, pool: str) -> Outcome:
    """Before draining: is there a node to replace this one with? Unknown counts as yes."""
    spare = provider.spare_capacity(pool)
    facts = {"pool": pool, "spare_capacity": spare}
    if spare is None:
        return Done(f"node pool {pool} does not report its spare capacity", facts)
    if spare <= 0:
        return Held(f"node pool {pool} has no spare capacity; replacing would shrink it", facts)
    return Done(f"node pool {pool} has {spare} spare node(s)", facts)


def judge_operation(
    op: Operation, *, started_at: datetime, now: datetime, timeout: float
) -> Outcome:
    """Where the provider's operation stands, as an outcome."""
    facts = _facts(op)
    if op.state is OperationState.SUCCEEDED:
        if not op.new_node:
            return Failed(f"replacement {op.id} succeeded without naming the new node", facts)
        return Done(f"{op.node} replaced by {op.new_node} (operation {op.id})", facts)
    if op.state is OperationState.FAILED:
        return Failed(
            f"replacement {op.id} of {op.node} failed: {op.error or 'no reason given'}", facts
        )
    if (now - started_at).total_seconds() > timeout:
        return Failed(
            f"replacement {op.id} of {op.node} still {op.state.value} after {timeout:.0f}s", facts
        )
    return Waiting(f"replacement {op.id} is {op.state.value}", POLL_SECONDS, facts)


def replace_node(
    provider: NodePoolProvider,
    *,
    pool: str,
    node: str,
    idempotency_key: str,
    reason: str,
    started_at: datetime,
    now: datetime,
    timeout_seconds: float = 900.0,
    operation_id: str | None = None,
) -> Outcome:
    """Request (or re-find, by key) the replacement, then report on it; call until not Waiting."""
    try:
        if operation_id is None:
            op = provider.request_replacement(pool, node, idempotency_key, reason)
        else:
            op = provider.get_operation(operation_id)
    except ReplacementPaused as exc:
        # A hold while it lasts (its reason shows), lifted by the next look after the pause.
        return Waiting(str(exc), PAUSE_POLL_SECONDS, {"pool": pool, "node": node, "holding": True})
    except ReplacementHeld as exc:
        return Held(str(exc), {"pool": pool, "node": node})
    except PermanentError as exc:
        return Failed(f"replacement of {node}: {exc}", {"pool": pool, "node": node})
    return judge_operation(op, started_at=started_at, now=now, timeout=timeout_seconds)
