"""A paused Cluster API Cluster through the real engine (issue 39 item 12): the replacement
waits, fenced, naming the Cluster, and goes ahead by itself once the Cluster is resumed — no
human command — with exactly one Machine deleted and one created."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.settings import ClusterApiProviderSettings
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, settings_for, wait_for, write_policies, xid

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NODE = "h100-train-0000"
PAUSED = "Machine default/h100-train-0000: Cluster default/sim is paused (spec.paused"


def machines(sim: SimHandle) -> set[str]:
    items = json.loads(sim.kubectl("get", "machines", "-A", "-o", "json"))["items"]
    return {str(m["metadata"]["name"]) for m in items}


def pause_cluster(sim: SimHandle, paused: bool) -> None:
    body = json.dumps({"spec": {"paused": paused}})
    sim.kubectl("patch", "cluster", "sim", "-n", "default", "--type", "merge", "-p", body)


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=4, provision_delay=0.3, cloud="clusterapi")
    policies = write_policies(tmp_path / "policies", drain_grace=1)
    settings = settings_for(sim, migrated_database_url, policies).model_copy(
        update={"provider": ClusterApiProviderSettings.model_validate(sim.provider)}
    )
    controller = Controller(settings, sources=[])
    controller.start(serve_web=False)
    handle = Engine(sim, controller)
    yield handle
    handle.close()


def test_a_paused_cluster_holds_the_replacement_until_it_is_resumed(engine: Engine) -> None:
    sim = engine.sim
    before = machines(sim)
    pause_cluster(sim, True)
    engine.push(xid(NODE))

    def held() -> bool:
        record = engine.of_node(NODE)
        return record is not None and PAUSED in (record.hold_reason or "")

    wait_for(held, timeout=60, what="the replacement held by the paused Cluster")
    record = engine.of_node(NODE)
    assert record is not None
    # Waiting in the step, not parked for a human: it looks again by itself.
    assert record.state is State.REPLACING, (record.state, record.hold_reason)
    node = engine.node(NODE)
    assert node is not None and node["spec"].get("unschedulable") is True  # I1: still fenced
    assert machines(sim) == before  # nothing deleted while Cluster API would not replace it

    pause_cluster(sim, False)
    done = engine.wait_state(NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=90)
    assert done.state is State.SUCCEEDED, (done.error, done.hold_reason)
    assert done.hold_reason is None
    assert not [e for e in done.events if e.actor != engine.controller.actor and e.to_state]
    after = machines(sim)
    assert before - after == {NODE} and after - before == {done.new_node}
    waited = [e for e in done.events if e.action == "progress" and e.detail.get("holding")]
    assert waited and PAUSED in str(waited[0].detail["reason"])
