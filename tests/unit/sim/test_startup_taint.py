"""The simulator's kubelets register every machine a cloud adds with the startup taints (as
`--register-with-taints` would), never the seeded fleet."""

from __future__ import annotations

from remediator.clock import FakeClock
from remediator.sim import fleet
from remediator.sim.cli import taint
from remediator.sim.kube.controllers.cluster import SimCluster

STARTUP = {"key": "remediator.io/unvalidated", "value": "true", "effect": "NoSchedule"}


def taints(cluster: SimCluster, name: str) -> list[dict[str, str]]:
    node = cluster.store.find("nodes", "", name)
    assert node is not None
    return list(node["spec"].get("taints") or [])


def test_new_machines_register_with_the_startup_taint_and_the_seeded_fleet_does_not() -> None:
    cluster = SimCluster(FakeClock())
    cluster.seed(fleet.plan(2, 8))
    cluster.set_startup_taints([STARTUP])
    seeded = sorted(cluster.pools().items())[0][1][0]
    cluster.add_node("new", "h100-train", 8, ready_after=5.0)
    assert STARTUP in taints(cluster, "new")
    assert STARTUP not in taints(cluster, seeded)


def test_without_startup_taints_a_new_machine_registers_untainted() -> None:
    cluster = SimCluster(FakeClock())
    cluster.add_node("new", "h100-train", 8)
    assert taints(cluster, "new") == []


def test_the_option_takes_the_kubelet_syntax() -> None:
    assert taint("remediator.io/unvalidated=true:NoSchedule") == STARTUP
    assert taint("k:NoExecute") == {"key": "k", "effect": "NoExecute"}
