"""A remediation whose node left the cluster (issue 22 item 12): it never counts toward a budget,
and it ends as replaced when its pool brought in a node after the request, else as "node gone"."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.kube.objects import Node, NodeCondition
from remediator.model.states import State
from remediator.remediation.intake import Inventory, cluster_state
from remediator.remediation.node_gone import gone_ones, successor
from remediator.store.records import RemediationRecord

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
POOL = "simcloud.io/nodepool"


def node(name: str, pool: str, joined: datetime | None = None) -> Node:
    ready = (NodeCondition("Ready", "True"),)
    return Node(name, name, "1", {POOL: pool}, conditions=ready, created_at=joined)


def record(node_name: str, pool: str | None, state: State, **extra: Any) -> Any:
    fields: dict[str, Any] = dict.fromkeys(RemediationRecord.__dataclass_fields__)
    fields.update(
        node=node_name, pool=pool, state=state, dry_run=False, id=1, created_at=NOW, ladder=()
    )
    fields.update(extra)
    return RemediationRecord(**fields)


def test_a_remediation_whose_node_is_gone_never_counts_toward_a_budget() -> None:
    inventory = Inventory.from_nodes([node("a", "train"), node("b", "train")], POOL)
    fencing = [
        record("a", "train", State.DRAINING),
        record("gone-1", "train", State.FAILED),
        record("gone-2", "train", State.HELD),
    ]
    state = cluster_state(inventory, fencing)
    assert state.unhealthy == {"train": frozenset({"a"})}
    assert state.open_remediations == 1


def test_a_replacement_in_flight_still_counts_while_its_old_node_is_gone() -> None:
    """The pool is one short until the new node is Ready: the budget keeps counting it."""
    inventory = Inventory.from_nodes([node("a", "train")], POOL)
    state = cluster_state(inventory, [record("old", "train", State.REPLACING)])
    assert state.unhealthy == {"train": frozenset({"old"})}
    assert state.open_remediations == 1


def test_the_successor_is_the_first_node_of_the_pool_that_joined_after_the_request() -> None:
    gone = record("old", "train", State.FAILED)
    nodes = [
        node("before", "train", NOW - timedelta(days=3)),
        node("other-pool", "infer", NOW + timedelta(minutes=1)),
        node("second", "train", NOW + timedelta(minutes=9)),
        node("first", "train", NOW + timedelta(minutes=4)),
        node("unknown-age", "train"),
    ]
    found = successor(gone, nodes, POOL, claimed=frozenset())
    assert found is not None and found.name == "first"
    claimed = successor(gone, nodes, POOL, claimed=frozenset({"first"}))
    assert claimed is not None and claimed.name == "second"
    assert successor(gone, nodes[:2], POOL, claimed=frozenset()) is None
    assert successor(replace(gone, pool=None), nodes, POOL, claimed=frozenset()) is None


def test_a_new_machine_on_trial_keeps_its_remediation_open_and_counted() -> None:
    """Validating a replacement: the old node is rightly gone, the remediation is not over (the
    DOA end-to-end test found it cancelled as "node gone" mid-validation) and the pool is still
    one short until the new machine passes."""
    trial = record("old", "train", State.VALIDATING, new_node="new")
    assert gone_ones([trial], frozenset({"new", "a"})) == []
    state = cluster_state(Inventory.from_nodes([node("a", "train")], POOL), [trial])
    assert state.unhealthy == {"train": frozenset({"old"})}


def test_a_node_that_never_turned_ready_is_no_successor() -> None:
    """Stop 33's full run: a Cluster API launch that timed out (its Node never Ready) was taken
    for the pool replacing the node, and the failed remediation ended 'succeeded'."""
    gone = record("old", "train", State.FAILED)
    stuck = replace(node("new", "train", NOW + timedelta(minutes=1)), conditions=())
    assert successor(gone, [stuck], POOL, claimed=frozenset()) is None
    ready = node("new", "train", NOW + timedelta(minutes=1))
    found = successor(gone, [ready], POOL, claimed=frozenset())
    assert found is not None and found.name == "new"
