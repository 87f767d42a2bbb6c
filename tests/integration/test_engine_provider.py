"""The cloud misbehaving while a node is being replaced: 5xx, 429, slow answers, answers lost
after the request took effect, more errors than the client retries, and no capacity at all.
Each remediation is retried or held with a clear reason, and none ever gets two replacements
(counted by the node pool's own spare capacity)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediator.model.states import State
from remediator.remediation import commands
from remediator.store.records import RemediationRecord
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, start_engine, wait_for, write_policies, xid

pytestmark = pytest.mark.integration

POOL = "h100-train"


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=10, provision_delay=0.5)
    policies = write_policies(tmp_path / "policies", drain_grace=1)
    handle = start_engine(
        sim,
        migrated_database_url,
        policies,
        provider={"timeout_seconds": 1.5, "max_retries": 3},
    )
    handle.nodepool_fault({"type": "spare_capacity", "pool": POOL, "spare": 10})
    yield handle
    handle.close()


def operations(record: RemediationRecord) -> set[str]:
    return {str(e.detail["operation_id"]) for e in record.events if "operation_id" in e.detail}


def replace_under(engine: Engine, node: str, *rules: dict[str, Any]) -> RemediationRecord:
    """Fault the node-pool API's POSTs before the fault, so the replacement request is the first
    to meet them (the capacity check and the operation's polls are GETs); returns the finished
    remediation."""
    before = engine.spare(POOL)
    for rule in rules:
        engine.nodepool_fault({**rule, "method": "POST"})
    engine.push(xid(node))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=90)
    engine.nodepool_fault({"type": "clear"})
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    assert engine.spare(POOL) == before - 1, "exactly one replacement"
    assert len(operations(done)) == 1 and done.replacement_operation_id in operations(done)
    return done


def test_provider_faults_are_retried_or_held_never_doubled(engine: Engine) -> None:
    # 5xx and 429 within the client's own retries: invisible to the engine but for the time.
    replace_under(
        engine,
        "h100-train-0000",
        {"type": "error", "status": 503, "count": 1},
        {"type": "throttle", "count": 2, "retry_after": 1},
    )

    # The request took effect but its answer was lost: the retry finds the same operation.
    replace_under(
        engine,
        "h100-train-0001",
        {"type": "error", "status": 500, "count": 1, "after_processing": True},
    )

    # Slower than the client waits: it gives up on the answer and asks again, same key.
    replace_under(engine, "h100-train-0002", {"type": "delay", "count": 1, "seconds": 3})

    # More errors than the client retries: the engine retries later, saying why.
    done = replace_under(engine, "h100-train-0003", {"type": "error", "status": 500, "count": 6})
    retries = [e for e in done.events if e.action == "retrying"]
    assert retries and "500" in str(retries[0].detail["error"])
    assert retries[0].detail["attempt"] == 1

    # No capacity: held before anything is evicted, with the reason; released by a human.
    node = "h100-train-0004"
    engine.nodepool_fault({"type": "spare_capacity", "pool": POOL, "spare": 0})
    engine.push(xid(node))
    held = engine.wait_state(node, State.HELD, State.SUCCEEDED, State.FAILED)
    assert held.state is State.HELD
    assert (
        held.hold_reason == "node pool h100-train has no spare capacity; replacing would shrink it"
    )
    workloads = [p for p in engine.pods_on(node) if p["metadata"]["namespace"] == "training"]
    assert workloads and not any(p["metadata"].get("deletionTimestamp") for p in workloads)

    # Released while the pool is still empty: it waits in the grace step (where the capacity
    # check runs, before the first eviction) for a spare node instead of bouncing straight back
    # into the hold the human just lifted, and evicts nothing meanwhile.
    commands.run(engine.repository, "release", held.id, actor="oncall@example.com")

    def waiting_for_capacity() -> bool:
        record = engine.repository.get(held.id)
        assert record is not None and record.state is State.CHECKPOINTING, record
        return any("waiting for a spare node" in str(e.detail) for e in record.events)

    wait_for(waiting_for_capacity, what="the released hold to wait for capacity")
    assert not any(p["metadata"].get("deletionTimestamp") for p in engine.pods_on(node))
    engine.nodepool_fault({"type": "spare_capacity", "pool": POOL, "spare": 1})
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=90)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    assert engine.spare(POOL) == 0 and len(operations(done)) == 1
    released = [e for e in done.events if e.action == "released"]
    # Held before the grace step's first eviction, and released back into it.
    assert released[0].actor == "oncall@example.com"
    assert released[0].to_state is State.CHECKPOINTING

    # Ten nodes before, ten after: every replacement replaced exactly one node.
    wait_for(lambda: len(engine.controller.kube.list_nodes()) == 10, what="ten nodes")


def test_a_60s_retry_after_schedules_the_next_attempt_a_minute_out(engine: Engine) -> None:
    """Issue 9, problem 12: a 60 s Retry-After was retried after 32 s. The provider's answer is
    honoured by scheduling the next attempt (durably, `next_attempt_at`), not by sleeping."""
    node = "h100-train-0005"
    before = engine.spare(POOL)
    engine.nodepool_fault({"type": "throttle", "count": 1, "retry_after": 60})
    engine.push(xid(node))

    def throttled() -> RemediationRecord | None:
        record = engine.of_node(node)
        return record if record is not None and record.next_attempt_at is not None else None

    wait_for(lambda: throttled() is not None, what="the throttled request")
    record = throttled()
    # The capacity check, before the grace's first eviction.
    assert record is not None and record.state is State.CHECKPOINTING
    assert record.error and "retry after 60s" in record.error
    retrying = [e for e in record.events if e.action == "retrying"]
    assert len(retrying) == 1
    scheduled = (record.next_attempt_at - retrying[0].at).total_seconds()
    assert 59.0 <= scheduled <= 61.0
    # Further engine cycles do not ask again before then, and nothing was replaced.
    for _ in range(3):
        engine.controller.advance()
    again = engine.of_node(node)
    assert again is not None and again.state is State.CHECKPOINTING
    assert [e.action for e in again.events].count("retrying") == 1
    assert engine.spare(POOL) == before
