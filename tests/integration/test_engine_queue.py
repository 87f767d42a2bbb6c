"""Queued decisions (issue 9, problem 1): a decision a budget holds is not a log line. The second
of two XID 79 nodes in a one-node pool budget becomes a `queued` remediation at once — recorded,
cordoned, shown in the console and the API, counted by a metric, announced once — and proceeds
on its own, under its own cause, as soon as the first one finishes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from remediator.model.states import State
from remediator.remediation import commands
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
OPERATOR = {"Authorization": "Bearer operator-token"}


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    tmp_path: Path,
    webhook: WebhookSink,
) -> Iterator[Engine]:
    sim = sim_factory(nodes=10, provision_delay=0.3)
    # 10% of the 8-node training pool, no floor: one node at a time.
    policies = write_policies(tmp_path / "policies", pool_percent=10, cluster_percent=50)
    handle = start_engine(sim, migrated_database_url, policies, notify={"webhook_url": webhook.url})
    handle.controller.start_web()
    yield handle
    handle.close()


def cordoned(engine: Engine, name: str) -> bool:
    node = engine.node(name)
    return bool(node and node["spec"].get("unschedulable"))


def test_a_held_decision_is_queued_visible_and_admitted_without_a_new_signal(
    engine: Engine, webhook: WebhookSink
) -> None:
    first, second = TRAIN[0], TRAIN[1]
    engine.push(xid(first), xid(second))

    queued = engine.wait_state(second, State.QUEUED, timeout=60)
    assert queued.queue_cause == "budget"
    assert queued.hold_reason == "max unhealthy in pool h100-train (1)"
    assert queued.policy == "xid-79" and queued.xid_code == 79
    assert [e.action for e in queued.events][:1] == ["queued"]
    assert engine.of_node(first) is not None

    # A dead GPU takes no new work while it waits: cordoned (while_queued: cordon), no eviction.
    wait_for(lambda: cordoned(engine, second), what="the queued node's cordon")
    assert engine.pods_on(second), "a queued node's pods are not evicted"

    # Visible: API, console list and detail, metric, one notification.
    api = engine.controller.web_url
    body = httpx.get(f"{api}/api/v1/remediations/{queued.id}", headers=OPERATOR).json()
    assert body["state"] == "queued" and body["queue_cause"] == "budget"
    with httpx.Client(base_url=str(api), follow_redirects=True) as console:
        login = {"token": "operator-token", "name": "carol", "next": "/"}
        assert console.post("/login", data=login).status_code == 200
        listing = console.get("/remediations").text
        assert "waiting for budget" in listing and second in listing
        detail = console.get(f"/remediations/{queued.id}").text
        assert "Waiting for budget: max unhealthy in pool h100-train (1)" in detail
    engine.controller.refresh_metrics()
    registry = engine.controller.registry
    assert registry.get_sample_value("remediator_remediations_queued", {"cause": "budget"}) == 1
    wait_for(lambda: any("Remediation queued" in t for t in webhook.texts()), what="the note")

    # No new signal: the queue admits it the moment the first one frees the budget.
    engine.wait_state(first, State.SUCCEEDED, timeout=90)
    done = engine.wait_state(second, State.SUCCEEDED, timeout=90)
    actions = [e.action for e in done.events]
    assert actions.index("queued") < actions.index("admitted") < actions.index("started")
    assert done.reason.startswith("xid-79") and done.xid_code == 79  # its own cause
    assert sum("Remediation queued" in t for t in webhook.texts()) == 1
    assert len(engine.remediations()) == 2


def test_a_reset_can_drop_the_breakers_queue_and_the_same_signals_stay_dropped(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> None:
    sim = sim_factory(nodes=10, provision_delay=0.3)
    policies = write_policies(tmp_path / "policies", max_new_faults=3)
    engine = start_engine(sim, migrated_database_url, policies)
    try:
        storm = TRAIN[:3]
        engine.push(*(xid(node) for node in storm))
        for node in storm:
            assert engine.wait_state(node, State.QUEUED).queue_cause == "breaker"
        assert engine.repository.controller_status().breaker_tripped

        commands.reset_breaker(
            engine.repository, actor="carol", reason="a bad exporter rollout", drop_queued=True
        )
        for node in storm:
            dropped = engine.wait_state(node, State.CANCELLED)
            assert dropped.suppressed_until is not None
            assert [e.action for e in dropped.events][-1] == "dropped"
        status = engine.repository.controller_status()
        assert not status.breaker_tripped and status.breaker_faults == ()

        # The same bad signals again (folded, in cooldown and covered by the drop's cancel):
        # nothing is queued or opened for them, and they do not trip the breaker again.
        engine.push(*(xid(node, gpu=0) for node in storm))
        wait_for(
            lambda: all(len(engine.repository.signals_for_node(n)) >= 2 for n in storm),
            what="the repeated signals to be decided",
        )
        assert len(engine.remediations()) == len(storm)
        assert not engine.repository.controller_status().breaker_tripped
    finally:
        engine.close()
