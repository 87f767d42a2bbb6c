"""Quarantined machines through the engine (issue #28, docs/ledger.md): a cancel of a
remediation on a quarantined machine leaves its node fenced until the quarantine is lifted, and
a quarantined machine back under a new node name is fenced on arrival, never released."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediator.actions.quarantine import ANN_MACHINE_HOLD
from remediator.fences.owner import KEPT_FENCED
from remediator.ledger.identity import machine_id
from remediator.ledger.store import FENCED, HOLD
from remediator.model.states import State
from remediator.remediation import commands
from remediator.remediation.machine_hold import FENCED_REASON
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import SETTINGS, Engine, start_engine, wait_for, xid
from tests.integration.test_engine_commands import POLICIES, marks, node_events

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=4, provision_delay=1.0)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policies.yaml").write_text(POLICIES)
    (policies / "settings.yaml").write_text(
        SETTINGS.format(pool_percent=100, cluster_percent=100, max_concurrent=10, max_new_faults=20)
    )
    handle = start_engine(sim, migrated_database_url, policies)
    yield handle
    handle.close()


def machine_of(engine: Engine, node: str) -> str:
    found = engine.node(node)
    assert found is not None
    machine = machine_id(found["spec"]["providerID"], found["metadata"].get("annotations") or {})
    assert machine is not None
    return machine


def test_a_cancel_leaves_a_quarantined_machines_node_fenced_until_the_lift(
    engine: Engine,
) -> None:
    node = "h100-train-0000"
    engine.push(xid(node, code=74))
    held = engine.wait_state(node, State.HELD, timeout=180)
    assert marks(engine, node) == (True, True, True)
    ledger = engine.controller.ledger
    machine = machine_of(engine, node)
    ledger.observe_machine(node, machine, datetime.now(UTC))
    assert ledger.quarantine(machine, "failed validation 3 times", datetime.now(UTC))

    cancelled = commands.run(
        engine.repository,
        "cancel",
        held.id,
        actor="oncall@example.com",
        machine_hold=engine.controller.machine_holds.hold_on,
    )
    assert cancelled.state is State.CANCELLED
    assert cancelled.hold_reason is not None and f"quarantined machine {machine}" in (
        cancelled.hold_reason
    )
    engine.controller.reconcile()
    engine.controller.reconcile()
    assert marks(engine, node) == (True, True, True)
    timeline = engine.repository.get(held.id)
    assert timeline is not None
    actions = [e.action for e in timeline.events]
    assert actions.count(KEPT_FENCED) == 1 and "node_released" not in actions
    assert timeline.events[-1].detail["node"] == node

    # The lift returns it: the next reconcile releases the node.
    assert ledger.lift(machine, datetime.now(UTC), actor="alice", reason="board swapped")
    engine.controller.reconcile()
    assert marks(engine, node) == (False, False, False)
    released = engine.repository.get(held.id)
    assert released is not None and released.events[-1].action == "node_released"


def test_a_quarantined_machine_back_under_a_new_name_is_fenced_on_arrival(
    engine: Engine,
) -> None:
    node = "h100-train-0001"
    machine = machine_of(engine, node)
    ledger = engine.controller.ledger
    # The machine was last seen, and quarantined, under a name the cluster no longer has.
    ledger.observe_machine("h100-train-old-0042", machine, datetime.now(UTC))
    assert ledger.quarantine(machine, "replaced 3 times within 30 days", datetime.now(UTC))

    wait_for(lambda: marks(engine, node) == (True, False, True), 180, f"{node} fenced")
    found = engine.node(node)
    assert found is not None
    assert found["metadata"]["annotations"][ANN_MACHINE_HOLD] == machine
    events = node_events(engine, node)
    said = [e["message"] for e in events if e["reason"] == FENCED_REASON]
    assert len(said) == 1 and "replaced 3 times within 30 days" in said[0]
    # The reconcile does not release it (no remediation owns the fence), the poll does not
    # fence it twice.
    engine.controller.reconcile()
    assert marks(engine, node) == (True, False, True)
    life = ledger.machine(machine)
    assert life is not None
    fenced = [link.node for link in life.links if link.subject == HOLD and link.kind == FENCED]
    assert fenced == [node]
    assert engine.of_node(node) is None
