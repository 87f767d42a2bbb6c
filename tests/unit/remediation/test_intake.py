"""The intake's pure parts: the inventory, the cluster state the budgets see, the breaker's
memory against the stored switch, and the remediation a decision opens."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from remediator.kube.objects import Node, NodeCondition
from remediator.model.states import State
from remediator.policy.budget import BreakerState
from remediator.policy.evaluate import Decision
from remediator.policy.loader import PolicySet
from remediator.policy.schema import Cordon, Drain, GlobalSettings, Notify, Policy
from remediator.remediation.intake import (
    Inventory,
    breaker_of,
    cleared_reason,
    cluster_state,
    never_started,
    new_remediation,
)
from remediator.signals.model import Signal, SignalKind
from remediator.store.records import ControllerStatus, RemediationRecord

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
POOL = "simcloud.io/nodepool"


def node(name: str, pool: str | None, ready: bool = True) -> Node:
    labels = {POOL: pool} if pool else {}
    status = "True" if ready else "False"
    return Node(name, name, "1", labels, conditions=(NodeCondition("Ready", status),))


def record(node_name: str, pool: str | None, state: State, dry_run: bool = False) -> Any:
    fields: dict[str, Any] = dict.fromkeys(RemediationRecord.__dataclass_fields__)
    fields.update(node=node_name, pool=pool, state=state, dry_run=dry_run, id=1)
    return RemediationRecord(**fields)


def test_inventory_reads_pools_labels_and_readiness() -> None:
    inventory = Inventory.from_nodes(
        [node("a", "train"), node("b", "train", ready=False), node("c", None)], POOL
    )
    assert inventory.pools == {"a": "train", "b": "train", "c": ""}
    assert inventory.not_ready == frozenset({"b"})
    assert inventory.nodes_per_pool() == {"train": 2, "": 1}
    assert inventory.labels["a"] == {POOL: "train"}


def test_cluster_state_counts_not_ready_and_fenced_nodes_but_not_dry_runs() -> None:
    inventory = Inventory.from_nodes(
        [node("a", "train"), node("b", "train", ready=False), node("c", "infer"), node("d", None)],
        POOL,
    )
    fencing = [
        record("a", "train", State.DRAINING),
        record("c", "infer", State.FAILED),
        record("d", None, State.QUARANTINED, dry_run=True),
    ]
    state = cluster_state(inventory, fencing)
    assert state.unhealthy == {"train": frozenset({"a", "b"}), "infer": frozenset({"c"})}
    assert state.open_remediations == 2
    assert state.nodes_per_pool == {"train": 2, "infer": 1, "": 1}


def test_a_node_cordoned_by_someone_else_counts_against_the_budgets() -> None:
    maintenance = replace(node("b", "train"), unschedulable=True)
    inventory = Inventory.from_nodes([node("a", "train"), maintenance, node("c", "train")], POOL)
    assert inventory.cordoned == frozenset({"b"})
    state = cluster_state(inventory, [record("a", "train", State.QUARANTINED)])
    assert state.unhealthy == {"train": frozenset({"a", "b"})}
    assert state.open_remediations == 1


def test_the_breaker_is_the_stored_one_trip_and_fault_window_alike() -> None:
    window = (("n1", NOW),)
    stored_trip = ControllerStatus(
        "c", breaker_tripped=True, breaker_reason="storm", breaker_faults=window
    )
    assert breaker_of(stored_trip) == BreakerState(True, None, "storm", window)
    assert breaker_of(ControllerStatus("c", breaker_faults=window)) == BreakerState(faults=window)


def test_queued_remediations_take_no_budget_and_opt_out_holds_no_concurrency() -> None:
    """A queued node's own cordon (while_queued) must not block it or its neighbours; an opt-out
    hold keeps its node out of service but runs no work."""
    queued_node = replace(node("q", "train"), unschedulable=True)
    inventory = Inventory.from_nodes(
        [node("a", "train"), queued_node, node("h", "train"), node("z", "train")], POOL
    )
    fencing = [
        record("q", "train", State.QUEUED),
        record("h", "train", State.HELD_BY_OPT_OUT),
        record("a", "train", State.DRAINING),
    ]
    state = cluster_state(inventory, fencing)
    assert state.unhealthy == {"train": frozenset({"a", "h"})}
    assert state.open_remediations == 1
    assert state.known == frozenset({"a", "q", "h", "z"})


def test_a_decision_becomes_a_remediation_with_its_ladder_and_policy_version() -> None:
    signal = Signal(node="a", kind=SignalKind.XID, source="push", observed_at=NOW, code=79, gpu=2)
    decision = Decision(
        node="a",
        pool="train",
        policy="xid-79",
        priority=100,
        signals=(signal,),
        actions=(
            Notify(action="notify"),
            Cordon(action="cordon"),
            Drain(action="drain", grace=timedelta(seconds=7), on_timeout="force"),
        ),
        approval="required",
        dry_run=True,
        disruptive=True,
        reason="xid-79: xid 79 on GPU 2",
        decided_at=NOW,
    )

    policies = PolicySet(
        policies=(),
        settings=GlobalSettings(),
        commit="abc123",
        dirty=False,
        content_hash="f" * 64,
        loaded_at=NOW,
        source_dir=Path("policies"),
        files={},
    )
    new = new_remediation(decision, policies)
    assert new.ladder[2] == {
        "action": "drain",
        "grace_seconds": 7.0,
        "timeout_seconds": 600.0,
        "on_timeout": "force",
    }
    assert (new.policy_commit, new.policy_hash) == ("abc123", "f" * 64)
    assert new.approval_required and new.dry_run and new.pool == "train"
    assert new.signals == (signal,)


def test_a_queued_remediation_closes_when_its_cause_is_gone() -> None:
    condition = Signal(
        node="a",
        kind=SignalKind.NODE_CONDITION,
        source="node-conditions",
        observed_at=NOW,
        labels={"type": "GpuFallenOffBus"},
    )
    queued = replace(record("a", "train", State.QUEUED), signals=(condition,))
    sick = Node(
        "a", "a", "1", {POOL: "train"}, conditions=(NodeCondition("GpuFallenOffBus", "True"),)
    )
    well = replace(sick, conditions=(NodeCondition("GpuFallenOffBus", "False"),))
    assert cleared_reason(queued, (), Inventory.from_nodes([sick], POOL), None) is None
    assert cleared_reason(queued, (), Inventory.from_nodes([well], POOL), None) == (
        "node condition GpuFallenOffBus cleared"
    )
    gone = Inventory.from_nodes([node("b", "train")], POOL)
    assert cleared_reason(queued, (), gone, None) == "node a has left the cluster"


def test_a_queued_threshold_remediation_closes_when_a_fresh_reading_clears() -> None:
    policy = Policy.model_validate(
        {
            "name": "hot",
            "description": "too hot",
            "why": "heat kills GPUs",
            "match": {"kind": "thermal", "threshold": {"above": 78, "clear": 75, "for": "2m"}},
            "actions": [{"action": "cordon"}],
        }
    )

    def reading(value: float, gpu: int = 0) -> Signal:
        return Signal(
            node="a", kind=SignalKind.THERMAL, source="p", observed_at=NOW, gpu=gpu, value=value
        )

    queued = replace(record("a", "train", State.QUEUED), signals=(reading(80),), policy="hot")
    inventory = Inventory.from_nodes([node("a", "train")], POOL)
    assert cleared_reason(queued, [reading(77)], inventory, policy) is None  # in the band
    assert cleared_reason(queued, [reading(60, gpu=1)], inventory, policy) is None  # other GPU
    assert (
        cleared_reason(queued, [reading(74)], inventory, policy) == "thermal reading cleared (74)"
    )


def test_a_remediation_closed_while_queued_never_started() -> None:
    closed = replace(record("a", "train", State.CANCELLED), queue_cause="budget")
    assert never_started(closed)
    assert not never_started(replace(closed, queue_cause=None))  # admitted, then cancelled
    assert not never_started(replace(closed, state=State.SUCCEEDED, queue_cause=None))
