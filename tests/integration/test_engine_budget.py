"""A mass event: faults on half the fleet at once. The budgets let at most one node per pool go,
the rest are held; a second wave trips the storm breaker, which is stored (so it survives a
restart) and stops every new remediation; no other node is touched."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediator.remediation.states import OPEN, State
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
    wait_for(lambda: len(engine.remediations()) >= 2, what="the admitted remediations")

    opened = {r.node: r for r in engine.remediations()}
    assert set(opened) == {TRAIN[0], INFER[0]}, opened  # one per pool, by node name
    status = engine.repository.controller_status()
    assert not status.breaker_tripped

    second_wave = TRAIN[4:6]
    engine.push(*(xid(node) for node in second_wave))
    wait_for(
        lambda: engine.repository.controller_status().breaker_tripped, what="the storm breaker"
    )
    status = engine.repository.controller_status()
    assert status.breaker_reason and "7 nodes newly faulted" in status.breaker_reason
    assert "a human must reset it" in status.breaker_reason
    # ... and pages a human, once.
    wait_for(lambda: any("Storm breaker tripped" in t for t in webhook.texts()), what="the page")

    # Nothing else opened, nothing else touched: the running two go on to the end.
    for node in opened:
        engine.wait_state(node, State.SUCCEEDED, timeout=90)
    assert {r.node for r in engine.remediations()} == set(opened)
    untouched = [n for n in TRAIN + INFER if n not in opened]
    assert not [n for n in untouched if fenced(engine, n)]
    assert not [r for r in engine.remediations() if r.state in OPEN]

    engine.controller.refresh_metrics()
    assert engine.controller.registry.get_sample_value("remediator_breaker_tripped") == 1

    # Still tripped for new faults until a human resets it.
    engine.push(xid(TRAIN[7]))
    engine.controller.take_pushed()
    assert engine.of_node(TRAIN[7]) is None
    assert sum("Storm breaker tripped" in t for t in webhook.texts()) == 1
