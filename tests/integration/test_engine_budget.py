"""A mass event: faults on half the fleet at once. The budgets let at most one node per pool go,
the rest are queued; a second wave trips the storm breaker, which is stored (so it survives a
restart) and queues every decision, the earlier ones included; no other node is touched."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediator.model.states import OPEN, State
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import (
    Engine,
    WebhookSink,
    start_engine,
    wait_for,
    write_policies,
    xid,
)

pytestmark = pytest.mark.integration

TRAIN = [f"h100-train-{i:04d}" for i in range(8)]
INFER = ["a100-infer-0000", "a100-infer-0001"]


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    tmp_path: Path,
    webhook: WebhookSink,
) -> Iterator[Engine]:
    sim = sim_factory(nodes=10, provision_delay=1.0)
    # 10% per pool: one node of each pool at a time; more than 6 new faults trip the breaker.
    policies = write_policies(
        tmp_path / "policies", pool_percent=10, cluster_percent=20, max_new_faults=6
    )
    handle = start_engine(sim, migrated_database_url, policies, notify={"webhook_url": webhook.url})
    yield handle
    handle.close()


def fenced(engine: Engine, name: str) -> bool:
    node = engine.node(name)
    if node is None:
        return False
    annotations = node["metadata"].get("annotations") or {}
    taints = node["spec"].get("taints") or []
    return bool(
        node["spec"].get("unschedulable")
        or "remediator.io/remediation-id" in annotations
        or any(t["key"] == "remediator.io/quarantine" for t in taints)
    )


def test_half_the_fleet_faulted_remediates_at_most_the_budget(
    engine: Engine, webhook: WebhookSink
) -> None:
    first_wave = [*TRAIN[:4], INFER[0]]  # 5 of 10 nodes at once
    engine.push(*(xid(node) for node in first_wave))
    wait_for(lambda: len(engine.remediations()) >= 5, what="the decisions")

    started = {r.node for r in engine.remediations() if r.state is not State.QUEUED}
    assert started == {TRAIN[0], INFER[0]}  # one per pool, by node name
    queued = {r.node: r for r in engine.remediations() if r.state is State.QUEUED}
    assert set(queued) == set(TRAIN[1:4])
    assert {r.queue_cause for r in queued.values()} == {"budget"}
    assert not engine.repository.controller_status().breaker_tripped

    second_wave = TRAIN[4:6]  # 7 distinct nodes newly faulted: the limit (6) is reached
    engine.push(*(xid(node) for node in second_wave))
    wait_for(
        lambda: engine.repository.controller_status().breaker_tripped, what="the storm breaker"
    )
    status = engine.repository.controller_status()
    # The base is every node present in the window: a replacement that joined counts too.
    base = re.search(r"7 of (\d+) nodes newly faulted", status.breaker_reason or "")
    assert base and 10 <= int(base.group(1)) <= 12, status.breaker_reason
    assert "a human must reset it" in status.breaker_reason
    # ... and pages a human, once.
    wait_for(lambda: any("Storm breaker tripped" in t for t in webhook.texts()), what="the page")

    # Every held decision is queued under the breaker now, and none of those nodes is touched:
    # the cordon a budget's hold gave is lifted, since the signals themselves are suspect.
    held = [*TRAIN[1:6]]
    wait_for(
        lambda: all(
            (r := engine.of_node(n)) is not None and r.queue_cause == "breaker" for n in held
        ),
        what="the breaker's queue",
    )
    wait_for(lambda: not [n for n in held if fenced(engine, n)], what="the queued nodes released")

    # The running two go on to the end; nothing else starts.
    for node in started:
        engine.wait_state(node, State.SUCCEEDED, timeout=90)
    assert {r.node for r in engine.remediations() if r.state is not State.QUEUED} == started
    untouched = [n for n in TRAIN + INFER if n not in started]
    assert not [n for n in untouched if fenced(engine, n)]
    assert not [r for r in engine.remediations() if r.state in OPEN - {State.QUEUED}]

    engine.controller.refresh_metrics()
    registry = engine.controller.registry
    assert registry.get_sample_value("remediator_breaker_tripped") == 1
    assert registry.get_sample_value("remediator_remediations_queued", {"cause": "breaker"}) == 5

    # Still tripped for new faults until a human resets it: the new one is queued too.
    engine.push(xid(TRAIN[7]))
    engine.controller.take_pushed()
    assert engine.wait_state(TRAIN[7], State.QUEUED).queue_cause == "breaker"
    assert sum("Storm breaker tripped" in t for t in webhook.texts()) == 1
