"""The seeded fleet: two pools of 8-GPU nodes, daemons everywhere, training gangs filling the
training pool, inference replicas spread under budgets, one opted-out evaluation run; the same
cluster for the same size; and 2,000 nodes seeded in seconds (the time is printed, not judged)."""

from __future__ import annotations

import time
from collections import Counter

from remediator.clock import FakeClock
from remediator.sim.fleet import INFER_POOL, TRAIN_POOL, plan, pool_sizes
from remediator.sim.kube.api.kobj import (
    GANG_LABEL,
    OPT_OUT_LABEL,
    controller_ref,
    gpu_request,
    is_ready,
)
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import GPU_RESOURCE, POOL_LABEL, SimCluster


def seeded(nodes: int) -> SimCluster:
    cluster = SimCluster(FakeClock())
    cluster.seed(plan(nodes))
    return cluster


def shape(cluster: SimCluster) -> list[tuple[str, str, str]]:
    pods, _ = cluster.store.list("pods")
    return sorted(
        (p["metadata"]["namespace"], p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods
    )


def test_pools_split_about_three_to_one_and_both_exist_from_two_nodes() -> None:
    assert pool_sizes(1) == (1, 0)
    assert pool_sizes(2) == (1, 1)
    assert pool_sizes(4) == (3, 1)
    assert pool_sizes(2000) == (1500, 500)


def test_a_seeded_fleet_has_the_realistic_shape() -> None:
    cluster = seeded(40)
    pools = cluster.pools()
    assert {pool: len(names) for pool, names in pools.items()} == {INFER_POOL: 10, TRAIN_POOL: 30}
    namespaces = {n["metadata"]["name"] for n in cluster.store.list("namespaces")[0]}
    assert {"kube-system", "gpu-operator", "training", "inference", "eval"} <= namespaces
    pods, _ = cluster.store.list("pods")
    assert all(p["status"]["phase"] == "Running" and is_ready(p) for p in pods)

    nodes = {n["metadata"]["name"]: n for n in cluster.store.list("nodes")[0]}
    for node in nodes.values():
        assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
        assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    used: Counter[str] = Counter()
    for pod in pods:
        used[pod["spec"]["nodeName"]] += gpu_request(pod)
    assert max(used.values()) <= 8

    for name in ("nvidia-dcgm-exporter", "node-problem-detector"):
        daemons = [p for p in pods if (controller_ref(p) or {}).get("name") == name]
        assert sorted(p["spec"]["nodeName"] for p in daemons) == sorted(nodes)

    jobs, _ = cluster.store.list("batch/jobs")
    gang_nodes: list[str] = []
    for job in jobs:
        members = [
            p for p in pods if p["metadata"]["labels"].get(GANG_LABEL) == job["metadata"]["name"]
        ]
        assert len(members) == job["spec"]["parallelism"] >= 2
        assert all(gpu_request(p) == 8 for p in members)
        gang_nodes += [p["spec"]["nodeName"] for p in members]
        assert job["status"]["active"] == len(members)
    assert len(gang_nodes) == len(set(gang_nodes))
    assert all(nodes[n]["metadata"]["labels"][POOL_LABEL] == TRAIN_POOL for n in gang_nodes)
    assert len(gang_nodes) >= 0.8 * len(pools[TRAIN_POOL])

    budgets = {
        b["metadata"]["name"]: b for b in cluster.store.list("policy/poddisruptionbudgets")[0]
    }
    replicasets, _ = cluster.store.list("apps/replicasets")
    assert replicasets
    for rs in replicasets:
        app = rs["spec"]["selector"]["matchLabels"]["app"]
        pdb = budgets[f"{app}-pdb"]
        assert pdb["spec"]["minAvailable"] == rs["spec"]["replicas"] - 1
        assert pdb["status"]["disruptionsAllowed"] == 1
        replicas = [
            p for p in pods if (controller_ref(p) or {}).get("uid") == rs["metadata"]["uid"]
        ]
        homes = [p["spec"]["nodeName"] for p in replicas]
        assert len(set(homes)) == len(homes)  # spread: one replica per node
        assert all(nodes[h]["metadata"]["labels"][POOL_LABEL] == INFER_POOL for h in homes)
    for name in pools[INFER_POOL]:
        assert nodes[name]["spec"]["taints"][0]["key"] == "simcloud.io/dedicated"

    assert any(v.get("emptyDir") is not None for p in pods for v in p["spec"].get("volumes") or [])
    opted_out = [p for p in pods if p["metadata"]["labels"].get(OPT_OUT_LABEL) == "true"]
    assert len(opted_out) == 1
    assert opted_out[0]["metadata"]["namespace"] == "eval"
    assert nodes[opted_out[0]["spec"]["nodeName"]]["metadata"]["labels"][POOL_LABEL] == TRAIN_POOL


def test_the_same_size_seeds_the_same_cluster() -> None:
    assert shape(seeded(12)) == shape(seeded(12))


def test_the_default_four_node_fleet_has_a_gang_a_budget_and_the_opt_out_pod() -> None:
    cluster = seeded(4)
    pods: list[Obj] = cluster.store.list("pods")[0]
    assert len(cluster.store.list("batch/jobs")[0]) == 1
    assert len(cluster.store.list("policy/poddisruptionbudgets")[0]) == 1
    assert sum(1 for p in pods if OPT_OUT_LABEL in p["metadata"]["labels"]) == 1


def test_two_thousand_nodes_seed_in_seconds_and_tick_cheaply() -> None:
    clock = FakeClock()
    cluster = SimCluster(clock)
    started = time.perf_counter()
    cluster.seed(plan(2000))
    seed_seconds = time.perf_counter() - started
    pods = len(cluster.store.list("pods")[0])
    clock.advance(0.1)
    started = time.perf_counter()
    cluster.tick()
    quiet_tick = time.perf_counter() - started
    print(
        f"\nseed(2000): {seed_seconds:.2f}s for {pods} pods; quiet tick {quiet_tick * 1000:.2f} ms"
    )
    assert pods >= 6000
    assert len(cluster.pools()[TRAIN_POOL]) == 1500
