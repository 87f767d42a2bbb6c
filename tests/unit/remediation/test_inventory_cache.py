"""InventoryCache: an inventory rebuilt only for the nodes that changed equals a full rebuild."""

from __future__ import annotations

from dataclasses import replace

from remediator.kube.objects import Node, NodeCondition
from remediator.remediation.intake import Inventory, InventoryCache

POOL = "pool"


def node(name: str, pool: str = "a", *, ready: bool = True, version: str = "1") -> Node:
    return Node(
        name,
        f"uid-{name}",
        version,
        {POOL: pool, "zone": "z1"},
        conditions=(NodeCondition("Ready", "True" if ready else "False"),),
        gpus=8,
        provider_id=f"aws:///us-east-1a/i-{name}",
    )


def test_unchanged_nodes_give_back_the_same_inventory() -> None:
    nodes = [node(f"n{i}") for i in range(5)]
    cache = InventoryCache(POOL)
    first = cache.build(nodes)
    assert first == Inventory.from_nodes(nodes, POOL)
    assert cache.build(list(nodes)) is first


def test_changed_added_and_removed_nodes_equal_a_full_rebuild() -> None:
    nodes = [node(f"n{i}") for i in range(6)]
    cache = InventoryCache(POOL)
    cache.build(nodes)
    later = [
        replace(nodes[0], resource_version="2", unschedulable=True),  # cordoned
        replace(nodes[1], resource_version="2", conditions=(NodeCondition("Ready", "False"),)),
        replace(nodes[2], resource_version="2", labels={POOL: "b"}, provider_id=""),
        *nodes[3:5],  # n5 left the cluster
        node("n9", "c", ready=False),  # joined
    ]
    rebuilt = cache.build(later)
    assert rebuilt == Inventory.from_nodes(later, POOL)
    assert rebuilt.cordoned == {"n0"}
    assert rebuilt.not_ready == {"n1", "n9"}
    assert rebuilt.pools["n2"] == "b" and "n2" not in rebuilt.machines
    assert "n5" not in rebuilt.pools and "n5" not in rebuilt.gpus
    # and back: the cordon lifted, n1 Ready again
    again = [replace(later[0], unschedulable=False), nodes[1], *later[2:]]
    assert cache.build(again) == Inventory.from_nodes(again, POOL)


def test_a_name_listed_twice_is_built_like_from_nodes() -> None:
    first, second = node("n0", "a"), node("n0", "b", version="2")
    cache = InventoryCache(POOL)
    cache.build([node("n1")])
    assert cache.build([first, second]) == Inventory.from_nodes([first, second], POOL)
    assert cache.build([first, second]).pools["n0"] == "b"


def test_the_previous_inventory_is_not_changed_by_a_rebuild() -> None:
    nodes = [node("n0"), node("n1")]
    cache = InventoryCache(POOL)
    before = cache.build(nodes)
    cache.build([replace(nodes[0], unschedulable=True)])
    assert before == Inventory.from_nodes(nodes, POOL)


def test_snapshots_and_gpu_counts_are_derived_once_per_inventory() -> None:
    nodes = [node("n0"), node("n1", "b", ready=False)]
    cache = InventoryCache(POOL)
    inventory = cache.build(nodes)
    snapshots = inventory.snapshots()
    assert snapshots["n1"].pool == "b" and not snapshots["n1"].ready
    assert inventory.gpu_counts() == {"n0": 8, "n1": 8}
    # an idle poll hands back the same inventory, and with it what was derived
    assert cache.build(nodes).snapshots() is snapshots
    changed = cache.build([replace(nodes[0], unschedulable=True), nodes[1]])
    assert changed.snapshots()["n0"].cordoned and not snapshots["n0"].cordoned
    assert changed == Inventory.from_nodes([replace(nodes[0], unschedulable=True), nodes[1]], POOL)
