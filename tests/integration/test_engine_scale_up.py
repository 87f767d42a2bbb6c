"""A node that joins carrying the startup taint with no remediation — here a machine an operator
replaced by hand through the node-pool API, as a scale-up or a manual add would bring one — gets
a validation of its own (#26): a good machine passes, loses the taint and takes work; a dead one
fails and keeps the taint and the cordon."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediator.kube.client import KubeClient
from remediator.model.states import State
from remediator.signals.sources.node_conditions import NodeConditionSource
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, start_engine
from tests.integration.test_engine_validate import H100, POOL, SETTINGS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STARTUP_TAINT = "remediator.io/unvalidated=true:NoSchedule"
KEY = "remediator.io/unvalidated"
NEW_MACHINES = f"""
policies:
  - name: new-machine-validation
    description: Joined with the startup taint and no remediation (a scale-up, a manual add).
    why: New machines arrive bad.
    match: {{kind: unvalidated}}
    actions:
      - action: validate
        dcgm_level: 2
        busbw_floor: {{"{H100}": 400}}
      - action: uncordon
"""


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=4, provision_delay=1.0, startup_taint=STARTUP_TAINT)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(NEW_MACHINES)
    (policies / "settings.yaml").write_text(f"{SETTINGS}startup_taint: {STARTUP_TAINT}\n")
    source = NodeConditionSource(KubeClient.from_kubeconfig(sim.controller_kubeconfig))
    started = start_engine(sim, migrated_database_url, policies, sources=[source])
    yield started
    started.close()


def replace_by_hand(engine: Engine, node: str) -> str:
    """An operator's replacement, outside the controller: the new machine no remediation knows."""
    url = f"{engine.sim.nodepool_url}/v1/pools/{POOL}/replacements"
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    body = {"node": node, "reason": "operator swap"}
    response = engine.http.post(url, json=body, headers=headers)
    assert response.status_code in (200, 201, 202), response.text
    op = response.json()["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        current = engine.http.get(f"{engine.sim.nodepool_url}/v1/operations/{op}").json()
        if current.get("new_node"):
            return str(current["new_node"])
        time.sleep(0.2)
    raise AssertionError(f"operation {op} named no new node")


def taint_keys(engine: Engine, name: str) -> set[str]:
    node = engine.node(name)
    assert node is not None
    return {t["key"] for t in node["spec"].get("taints") or []}


def test_a_machine_that_joined_by_itself_is_validated_before_it_takes_work(
    engine: Engine,
) -> None:
    seeded = sorted(
        engine.sim.kubectl("get", "nodes", "-l", f"simcloud.io/nodepool={POOL}", "-o", "name")
        .replace("node/", "")
        .split()
    )
    engine.nodepool_fault(
        {"type": "doa_next", "pool": POOL, "fault": {"type": "xid", "gpu": 3, "code": 79}}
    )
    dead = replace_by_hand(engine, seeded[0])
    failed = engine.wait_state(dead, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert failed.state is State.FAILED, (failed.hold_reason, failed.error)
    assert failed.policy == "new-machine-validation" and failed.signal_kind == "unvalidated"
    assert "unvalidated" in failed.reason
    (line,) = [e for e in failed.events if e.action == "validate_failed"]
    assert "GPU 3" in line.detail["reason"]
    assert KEY in taint_keys(engine, dead), "a failed validation leaves the startup taint"
    dead_node = engine.node(dead)
    assert dead_node is not None and dead_node["spec"].get("unschedulable") is True

    good = replace_by_hand(engine, seeded[1])
    done = engine.wait_state(good, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert done.state is State.SUCCEEDED, (done.hold_reason, done.error)
    (passed,) = [e for e in done.events if e.action == "validate_done"]
    assert passed.detail["startup_taint_removed"] == STARTUP_TAINT
    assert KEY not in taint_keys(engine, good)
    good_node = engine.node(good)
    assert good_node is not None and not good_node["spec"].get("unschedulable")
    # One remediation per machine, none for the seeded (validated) fleet.
    opened = {r.node for r in engine.remediations()}
    assert opened == {dead, good}, opened
