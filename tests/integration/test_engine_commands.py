"""The engine with on-call in the loop: approval-required policies wait for approve, a cancel is
followed by the reconcile loop lifting the quarantine (on the timeline too), a node fenced by an
unknown remediation is released, dry runs walk the whole ladder touching nothing, and a pause
stops new remediations."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediator.actions.quarantine import ANN_REMEDIATION_ID
from remediator.model.states import State
from remediator.remediation import commands
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import SETTINGS, Engine, start_engine, xid

pytestmark = pytest.mark.integration

POLICIES = """
policies:
  - name: approve-first
    description: XID 79 needs a human's approval here.
    why: Exercise the approval gate.
    match: {kind: xid, codes: [79]}
    approval: required
    actions:
      - action: cordon
  - name: dry-run-ladder
    description: XID 48, rehearsed only.
    why: Exercise the dry run through every step.
    match: {kind: xid, codes: [48]}
    dry_run: true
    actions:
      - action: notify
      - action: cordon
      - action: checkpoint
        max_grace: 1s
      - action: drain
      - action: replace
  - name: fence-only
    description: XID 74 only fences the node.
    why: Exercise a ladder that ends with the quarantine.
    match: {kind: xid, codes: [74]}
    actions:
      - action: cordon
"""


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=8, provision_delay=1.0)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policies.yaml").write_text(POLICIES)
    (policies / "settings.yaml").write_text(
        SETTINGS.format(pool_percent=100, cluster_percent=100, max_concurrent=10, max_new_faults=20)
    )
    handle = start_engine(sim, migrated_database_url, policies)
    yield handle
    handle.close()


def marks(engine: Engine, node: str) -> tuple[bool, bool, bool]:
    """(cordoned, our annotation, our taint)"""
    found = engine.node(node)
    assert found is not None
    taints = found["spec"].get("taints") or []
    return (
        bool(found["spec"].get("unschedulable")),
        ANN_REMEDIATION_ID in (found["metadata"].get("annotations") or {}),
        any(t["key"] == "remediator.io/quarantine" for t in taints),
    )


def node_events(engine: Engine, node: str) -> list[dict[str, Any]]:
    """The Events about `node`, read with stock kubectl."""
    out = engine.sim.kubectl(
        "get",
        "events",
        "-n",
        "default",
        "-o",
        "json",
        "--field-selector",
        f"involvedObject.name={node}",
    )
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def test_approval_then_cancel_then_release(engine: Engine) -> None:
    node = "h100-train-0000"
    engine.push(xid(node, code=79))
    waiting = engine.wait_state(node, State.AWAITING_APPROVAL)
    assert marks(engine, node) == (False, False, False)

    commands.run(engine.repository, "approve", waiting.id, actor="oncall@example.com")
    held = engine.wait_state(node, State.HELD)
    assert held.hold_reason and "ends after quarantine" in held.hold_reason
    assert marks(engine, node) == (True, True, True)

    commands.run(engine.repository, "cancel", held.id, actor="oncall@example.com")
    engine.controller.reconcile()
    assert marks(engine, node) == (False, False, False)
    cancelled = engine.repository.get(held.id)
    assert cancelled is not None and cancelled.state is State.CANCELLED
    assert [e.action for e in cancelled.events][-2:] == ["cancelled", "node_released"]
    assert cancelled.events[-1].actor == engine.controller.actor


def test_a_node_fenced_by_no_known_remediation_is_kept_and_listed_as_foreign(
    engine: Engine,
) -> None:
    """docs/safety.md I2: an id this store does not have is another history's fence (a
    restored backup, another database): never released by itself, listed for an operator."""
    node = "h100-train-0001"
    engine.sim.kubectl("cordon", node)
    engine.sim.kubectl("annotate", "node", node, f"{ANN_REMEDIATION_ID}=999999")
    engine.sim.kubectl("taint", "node", node, "remediator.io/quarantine=true:NoSchedule")
    engine.controller.reconcile()
    assert marks(engine, node) == (True, True, True)
    (foreign,) = engine.controller.fences.foreign()
    assert foreign.node == node and "999999 is not in this store's history" in foreign.why

    # A human's own cordon (no mark of ours) is left alone.
    other = "h100-train-0002"
    engine.sim.kubectl("cordon", other)
    engine.controller.reconcile()
    assert marks(engine, other) == (True, False, False)


def test_dry_run_walks_the_ladder_and_touches_nothing(engine: Engine) -> None:
    node = "h100-train-0003"
    spare = engine.spare("h100-train")
    engine.push(xid(node, code=48))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.state is State.SUCCEEDED and done.dry_run
    results = [str(e.detail.get("result", "")) for e in done.events if e.to_state]
    assert any(r.startswith("dry run: would annotate") for r in results), results
    assert any(r.startswith("dry run: would evict") for r in results), results
    assert any(r.startswith("dry run: would ask node pool h100-train") for r in results)
    assert marks(engine, node) == (False, False, False)
    assert engine.spare("h100-train") == spare
    assert not any(p["metadata"].get("deletionTimestamp") for p in engine.pods_on(node))


def test_pause_stops_new_remediations_and_new_steps(engine: Engine) -> None:
    waiting_node, new_node = "h100-train-0004", "h100-train-0005"
    engine.push(xid(waiting_node, code=79))
    waiting = engine.wait_state(waiting_node, State.AWAITING_APPROVAL)

    commands.pause(engine.repository, actor="oncall@example.com", reason="maintenance")
    commands.run(engine.repository, "approve", waiting.id, actor="oncall@example.com")
    engine.push(xid(new_node, code=74))
    engine.controller.take_pushed()
    engine.controller.advance()
    queued = engine.of_node(new_node)  # decided, but queued under the pause: nothing touched
    assert queued is not None and queued.state is State.QUEUED and queued.queue_cause == "pause"
    assert marks(engine, new_node) == (False, False, False)
    still = engine.of_node(waiting_node)
    assert still is not None and still.state is State.QUARANTINED
    assert marks(engine, waiting_node) == (False, False, False)
    engine.controller.refresh_metrics()
    assert engine.controller.registry.get_sample_value("remediator_paused") == 1

    commands.resume(engine.repository, actor="oncall@example.com", reason="done")
    held = engine.wait_state(waiting_node, State.HELD)
    assert marks(engine, waiting_node) == (True, True, True)
    assert held.policy == "approve-first"
    assert engine.wait_state(new_node, State.HELD).policy == "fence-only"  # admitted on resume


def test_a_bad_policy_edit_keeps_the_last_good_set(engine: Engine) -> None:
    controller = engine.controller
    good = controller.policies.active
    assert good is not None
    registry = controller.registry
    assert (
        registry.get_sample_value(
            "remediator_policy_set_info", {"commit": good.commit or "", "hash": good.content_hash}
        )
        == 1
    )

    directory = controller.settings.policies_dir
    (directory / "broken.yaml").write_text("policies:\n  - name: Not A Name\n")
    controller.housekeeping()
    assert controller.policies.active is good
    assert registry.get_sample_value("remediator_policy_load_errors_total") == 1
    refused = engine.repository.latest_policy_set()
    assert refused is not None and refused.status == "refused"
    assert refused.error and "broken.yaml" in refused.error
    controller.housekeeping()
    assert registry.get_sample_value("remediator_policy_load_errors_total") == 1

    (directory / "broken.yaml").unlink()
    (directory / "extra.yaml").write_text(
        POLICIES.replace("approve-first", "approve-again")
        .replace("dry-run-ladder", "dry-run-again")
        .replace("fence-only", "fence-again")
        .replace("codes: [79]", "codes: [62]")
        .replace("codes: [48]", "codes: [64]")
        .replace("codes: [74]", "codes: [95]")
    )
    controller.housekeeping()
    active = controller.policies.active
    assert active is not None and active is not good and active.policy("fence-again")
    recorded = engine.repository.latest_policy_set()
    assert recorded is not None and recorded.status == "ok"
    assert recorded.content_hash == active.content_hash
    assert (
        registry.get_sample_value(
            "remediator_policy_set_info", {"commit": good.commit or "", "hash": good.content_hash}
        )
        is None
    )
