"""The opt-out label: a pod labelled remediator.io/disable-auto-replace=true keeps its node from
being drained or replaced. The node is still quarantined (no new work lands), on-call is told,
and the remediation goes on by itself once the labelled pod has finished."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediator.model.states import State
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

NODE, POOL, EVAL = "h100-train-0005", "h100-train", ("eval", "eval-longrun-0")


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    tmp_path: Path,
    webhook: WebhookSink,
) -> Iterator[Engine]:
    sim = sim_factory(nodes=8, provision_delay=1.0)
    policies = write_policies(tmp_path / "policies")
    handle = start_engine(sim, migrated_database_url, policies, notify={"webhook_url": webhook.url})
    yield handle
    handle.close()


def test_opt_out_holds_the_node_until_the_labelled_pod_is_gone(
    engine: Engine, webhook: WebhookSink
) -> None:
    labelled = [p for p in engine.pods_on(NODE) if p["metadata"]["name"] == EVAL[1]]
    assert labelled and labelled[0]["metadata"]["labels"]["remediator.io/disable-auto-replace"]
    spare_before = engine.spare(POOL)

    engine.push(xid(NODE))
    held = engine.wait_state(NODE, State.HELD_BY_OPT_OUT)
    assert held.hold_reason and "eval/eval-longrun-0" in held.hold_reason
    # The label has no owner and no expiry: the reason says so, with the time it was set.
    assert "eval/eval-longrun-0: label, no expiry, set since " in held.hold_reason
    assert held.hold_reason.endswith("(from the pod's creation time)")

    # Fenced, but nothing evicted and nothing replaced, for as long as the pod is there.
    node = engine.node(NODE)
    assert node is not None and node["spec"]["unschedulable"] is True
    time.sleep(3 * engine.controller.settings.advance_interval_seconds + 1.0)
    assert engine.of_node(NODE).state is State.HELD_BY_OPT_OUT  # type: ignore[union-attr]
    assert all(not p["metadata"].get("deletionTimestamp") for p in engine.pods_on(NODE))
    assert engine.spare(POOL) == spare_before
    wait_for(lambda: any("held" in t and NODE in t for t in webhook.texts()), what="on-call note")

    # The workload finishes (its owner deletes it); the remediation resumes by itself.
    engine.sim.kubectl("delete", "pod", "-n", EVAL[0], EVAL[1], "--grace-period=1", "--wait=false")
    done = engine.wait_state(NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=60)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    moves = [e.to_state for e in done.events if e.to_state is not None]
    assert moves[:4] == [
        State.DETECTED,
        State.QUARANTINED,
        State.HELD_BY_OPT_OUT,
        State.CHECKPOINTING,
    ]
    resumed = [e for e in done.events if e.action == "opt_out_cleared"]
    assert len(resumed) == 1 and resumed[0].actor == engine.controller.actor
    assert engine.spare(POOL) == spare_before - 1
    assert engine.node(NODE) is None
