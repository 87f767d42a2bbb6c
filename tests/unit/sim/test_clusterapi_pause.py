"""The simulated MachineSet controller honours pauses as Cluster API's does (`IsPaused`: the
owning Cluster's `spec.paused`, or the MachineSet's own `cluster.x-k8s.io/paused` annotation
unless its value is "false"), driven tick by tick on a fake clock."""

from __future__ import annotations

import pytest

from remediator.clock import FakeClock
from remediator.sim.cloud.clusterapi.controller import (
    CLUSTERS,
    MACHINES,
    MACHINESETS,
    NAMESPACE,
    SimClusterApi,
)
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import SimCluster

POOL = "h100-train"


CLOCK = FakeClock()


@pytest.fixture
def capi() -> SimClusterApi:
    cluster = SimCluster(clock=CLOCK)
    for i in range(3):
        cluster.add_node(f"{POOL}-{i}", POOL, 8)
    api = SimClusterApi(cluster, provision_delay=0.0)
    api.bootstrap()
    return api


def machines(api: SimClusterApi) -> set[str]:
    return {m["metadata"]["name"] for m in api.cluster.store.list(MACHINES)[0]}


def tick(api: SimClusterApi, seconds: float = 1.0) -> None:
    CLOCK.advance(seconds)
    api.tick(CLOCK.now())


def set_paused(api: SimClusterApi, paused: bool) -> None:
    def change(obj: Obj) -> None:
        obj["spec"]["paused"] = paused

    api.cluster.store.mutate(CLUSTERS, NAMESPACE, "sim", change)


def paused_condition(api: SimClusterApi) -> Obj | None:
    ms = api.cluster.store.list(MACHINESETS)[0][0]
    conditions = ((ms.get("status") or {}).get("v1beta2") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Paused"), None)


def test_the_cluster_object_is_served_unpaused(capi: SimClusterApi) -> None:
    (found,) = capi.cluster.store.list(CLUSTERS)[0]
    assert found["kind"] == "Cluster" and found["metadata"]["name"] == "sim"
    assert found["spec"]["paused"] is False


def test_a_paused_cluster_stops_replacement_until_it_is_resumed(capi: SimClusterApi) -> None:
    before = machines(capi)
    set_paused(capi, True)
    capi.cluster.store.delete(MACHINES, NAMESPACE, f"{POOL}-0")
    for _ in range(3):
        tick(capi)
    assert machines(capi) == before - {f"{POOL}-0"}
    condition = paused_condition(capi)
    assert condition is not None and condition["status"] == "True"
    assert condition["message"] == "Cluster sim is paused"

    set_paused(capi, False)
    tick(capi)
    assert len(machines(capi)) == 3 and f"{POOL}-0" not in machines(capi)
    condition = paused_condition(capi)
    assert condition is not None and condition["status"] == "False"


@pytest.mark.parametrize(("value", "replaced"), [("", False), ("true", False), ("false", True)])
def test_the_machineset_annotation_pauses_unless_false(
    capi: SimClusterApi, value: str, replaced: bool
) -> None:
    ms = capi.cluster.store.list(MACHINESETS)[0][0]

    def annotate(obj: Obj) -> None:
        obj["metadata"].setdefault("annotations", {})["cluster.x-k8s.io/paused"] = value

    capi.cluster.store.mutate(MACHINESETS, NAMESPACE, ms["metadata"]["name"], annotate)
    capi.cluster.store.delete(MACHINES, NAMESPACE, f"{POOL}-1")
    tick(capi)
    assert (len(machines(capi)) == 3) is replaced
