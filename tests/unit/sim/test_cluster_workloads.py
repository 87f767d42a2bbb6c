"""SimCluster controllers on a fake clock: the eviction subresource against PodDisruptionBudgets,
ReplicaSet replacement on schedulable nodes only, DaemonSets on cordoned nodes, training gangs
requeued as a whole, and what removing a node does."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.clock import FakeClock
from remediator.sim.kube.api.kobj import GANG_GENERATION, GANG_LABEL, controller_ref, is_terminating
from remediator.sim.kube.api.store import ApiError, InternalError, NotFound, Obj, TooManyRequests
from remediator.sim.kube.controllers.cluster import GPU_RESOURCE, POOL_LABEL, SimCluster

NS = "inference"
INFER_TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


def run_for(cluster: SimCluster, clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    cluster.tick()
    for _ in range(round(seconds / step)):
        clock.advance(step)
        cluster.tick()


def template(labels: dict[str, str], gpus: int, pool: str, **spec: Any) -> Obj:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "nodeSelector": {POOL_LABEL: pool},
            "containers": [
                {
                    "name": "main",
                    "image": "server:1",
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                }
            ],
            **spec,
        },
    }


def replicaset(name: str, replicas: int, gpus: int = 1, pool: str = "infer", **spec: Any) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": template(labels, gpus, pool, **spec),
        },
    }


def budget(name: str, app: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


def pods(cluster: SimCluster, app: str) -> list[Obj]:
    items, _ = cluster.store.list("pods")
    found = [p for p in items if (p["metadata"].get("labels") or {}).get("app") == app]
    return sorted(found, key=lambda p: p["metadata"]["name"])


def live(cluster: SimCluster, app: str) -> list[Obj]:
    return [p for p in pods(cluster, app) if not is_terminating(p)]


def cordon(cluster: SimCluster, node: str) -> None:
    def change(obj: Obj) -> None:
        obj["spec"]["unschedulable"] = True

    cluster.store.mutate("nodes", "", node, change)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def serving(clock: FakeClock) -> SimCluster:
    """Three inference nodes running `web` (3 replicas, at most one may be disrupted)."""
    cluster = SimCluster(clock)
    for i in range(3):
        cluster.add_node(f"infer-{i}", "infer", 8)
    cluster.store.create("apps/replicasets", replicaset("web", 3))
    cluster.store.create("policy/poddisruptionbudgets", budget("web-pdb", "web", minAvailable=2))
    run_for(cluster, clock, 1.0)
    return cluster


def test_replicas_spread_across_nodes_and_the_budget_reports_its_math(serving: SimCluster) -> None:
    assert sorted(p["spec"]["nodeName"] for p in pods(serving, "web")) == [
        "infer-0",
        "infer-1",
        "infer-2",
    ]
    status = serving.store.get("policy/poddisruptionbudgets", NS, "web-pdb")["status"]
    assert {
        k: status[k]
        for k in ("currentHealthy", "desiredHealthy", "expectedPods", "disruptionsAllowed")
    } == {
        "currentHealthy": 3,
        "desiredHealthy": 2,
        "expectedPods": 3,
        "disruptionsAllowed": 1,
    }
    assert status["observedGeneration"] == 1
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "DisruptionAllowed",
        "True",
        "SufficientPods",
    )
    rs = serving.store.get("apps/replicasets", NS, "web")
    assert rs["status"]["replicas"] == 3
    assert rs["status"]["readyReplicas"] == 3


def test_eviction_spends_the_budget_then_429s_until_the_replacement_is_ready(
    serving: SimCluster, clock: FakeClock
) -> None:
    first, second, _ = pods(serving, "web")
    serving.evict(NS, first["metadata"]["name"], grace_period_seconds=10)
    evicted = serving.store.get("pods", NS, first["metadata"]["name"])
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 10
    target = next(c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert target["reason"] == "EvictionByEvictionAPI"
    spent = serving.store.get("policy/poddisruptionbudgets", NS, "web-pdb")["status"]
    assert spent["disruptionsAllowed"] == 0
    assert first["metadata"]["name"] in spent["disruptedPods"]

    serving.tick()  # the ReplicaSet replaces the terminating pod at once; it is not ready yet
    assert len(live(serving, "web")) == 3
    with pytest.raises(TooManyRequests) as err:
        serving.evict(NS, second["metadata"]["name"])
    body = err.value.status()
    assert body["code"] == 429
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently",
        }
    ]
    assert (
        serving.store.get("pods", NS, second["metadata"]["name"])["metadata"].get(
            "deletionTimestamp"
        )
        is None
    )

    run_for(serving, clock, 1.0)
    assert (
        serving.store.get("policy/poddisruptionbudgets", NS, "web-pdb")["status"][
            "disruptionsAllowed"
        ]
        == 1
    )
    serving.evict(NS, second["metadata"]["name"])
    assert serving.store.get("pods", NS, second["metadata"]["name"])["metadata"][
        "deletionTimestamp"
    ]


def test_eviction_of_a_terminating_pod_is_allowed_without_spending_budget(
    serving: SimCluster,
) -> None:
    victim = pods(serving, "web")[0]["metadata"]["name"]
    serving.delete_pod(NS, victim)
    serving.tick()
    before = serving.store.get("policy/poddisruptionbudgets", NS, "web-pdb")["status"]
    serving.evict(NS, victim)
    after = serving.store.get("policy/poddisruptionbudgets", NS, "web-pdb")["status"]
    assert after == before


def test_eviction_errors_not_found_and_several_budgets(serving: SimCluster) -> None:
    with pytest.raises(NotFound) as missing:
        serving.evict(NS, "no-such-pod")
    assert missing.value.status()["code"] == 404
    serving.store.create(
        "policy/poddisruptionbudgets", budget("web-pdb-2", "web", maxUnavailable=1)
    )
    serving.tick()
    with pytest.raises(InternalError) as err:
        serving.evict(NS, pods(serving, "web")[0]["metadata"]["name"])
    body = err.value.status()
    assert body["code"] == 500
    assert body["message"] == (
        "Internal error occurred: This pod has more than one PodDisruptionBudget, which the "
        "eviction subresource does not support."
    )


def test_a_budget_not_yet_processed_answers_429_with_retry_after(
    serving: SimCluster, clock: FakeClock
) -> None:
    serving.store.create("apps/replicasets", replicaset("api", 2))
    serving.store.create("policy/poddisruptionbudgets", budget("api-pdb", "api", maxUnavailable=1))
    run_for(serving, clock, 1.0)
    serving.store.delete("policy/poddisruptionbudgets", NS, "api-pdb")
    serving.store.create(
        "policy/poddisruptionbudgets", budget("api-pdb", "api", maxUnavailable="50%")
    )
    running = [p for p in pods(serving, "api") if p["spec"].get("nodeName")]
    with pytest.raises(ApiError) as err:
        serving.evict(NS, running[0]["metadata"]["name"])
    assert err.value.code == 429
    assert err.value.headers == {"Retry-After": "10"}
    assert "still being processed" in err.value.status()["details"]["causes"][0]["message"]


def test_replacements_land_only_on_schedulable_tolerated_nodes(clock: FakeClock) -> None:
    cluster = SimCluster(clock)
    for name in ("n-a", "n-b", "n-c", "n-d"):
        cluster.add_node(name, "infer", 8)
    tolerations = [
        {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
    ]
    cluster.store.create("apps/replicasets", replicaset("web", 1, tolerations=tolerations))
    run_for(cluster, clock, 1.0)
    (pod,) = pods(cluster, "web")
    assert pod["spec"]["nodeName"] == "n-a"

    cordon(cluster, "n-a")
    cordon(cluster, "n-b")

    def taint(node: Obj, what: dict[str, str]) -> None:
        node["spec"].setdefault("taints", []).append(dict(what))

    cluster.store.mutate(
        "nodes",
        "",
        "n-c",
        lambda n: taint(n, {"key": "gpu-health", "value": "bad", "effect": "NoSchedule"}),
    )
    cluster.store.mutate("nodes", "", "n-d", lambda n: taint(n, INFER_TAINT))
    cluster.tick()
    cordoned = cluster.store.get("nodes", "", "n-b")["spec"]["taints"]
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in cordoned

    cluster.evict(NS, pod["metadata"]["name"])
    run_for(cluster, clock, 1.0)
    (replacement,) = live(cluster, "web")
    assert replacement["spec"]["nodeName"] == "n-d"
    assert replacement["status"]["phase"] == "Running"
    assert (controller_ref(replacement) or {}).get("name") == "web"

    cordon(cluster, "n-d")
    cluster.delete_pod(NS, replacement["metadata"]["name"], grace_period_seconds=0)
    run_for(cluster, clock, 1.0)
    (stuck,) = live(cluster, "web")
    assert not stuck["spec"].get("nodeName")
    scheduled = next(c for c in stuck["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False"
    assert scheduled["message"].startswith("0/4 nodes are available: 3 node(s) were unschedulable")
    assert "untolerated taint {gpu-health: bad}" in scheduled["message"]

    def uncordon(obj: Obj) -> None:
        obj["spec"]["unschedulable"] = False

    cluster.store.mutate("nodes", "", "n-b", uncordon)
    run_for(cluster, clock, 1.0)
    (placed,) = live(cluster, "web")
    assert placed["spec"]["nodeName"] == "n-b"


def daemonset(name: str) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "generation": 1},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "containers": [{"name": name, "image": f"{name}:1"}],
                },
            },
        },
    }


def test_daemon_pods_stay_on_cordoned_nodes_and_follow_the_node_set(clock: FakeClock) -> None:
    cluster = SimCluster(clock)
    for i in range(3):
        cluster.add_node(f"gpu-{i}", "train", 8)
    cluster.store.create("apps/daemonsets", daemonset("dcgm"))
    run_for(cluster, clock, 1.0)
    assert sorted(p["spec"]["nodeName"] for p in pods(cluster, "dcgm")) == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
    ]
    assert all(p["status"]["phase"] == "Running" for p in pods(cluster, "dcgm"))

    cordon(cluster, "gpu-1")
    cluster.set_node_condition("gpu-1", "Ready", "False", "KubeletNotReady", "driver reload")
    run_for(cluster, clock, 400, step=10)
    on_cordoned = [p for p in pods(cluster, "dcgm") if p["spec"]["nodeName"] == "gpu-1"]
    assert len(on_cordoned) == 1
    assert not is_terminating(on_cordoned[0])

    cluster.add_node("gpu-3", "train", 8)
    cluster.remove_node("gpu-0")
    run_for(cluster, clock, 1.0)
    assert sorted(p["spec"]["nodeName"] for p in pods(cluster, "dcgm")) == [
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]
    # A NotReady node keeps its daemon but no longer counts as a place one should run.
    status = cluster.store.get("apps/daemonsets", "kube-system", "dcgm")["status"]
    assert status["desiredNumberScheduled"] == 2
    assert status["currentNumberScheduled"] == 2
    assert status["numberMisscheduled"] == 1
    assert status["numberReady"] == 2


def gang_job(name: str, size: int, pool: str = "train") -> Obj:
    labels = {GANG_LABEL: name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "training", "generation": 1},
        "spec": {
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "template": template(labels, 8, pool, restartPolicy="Never"),
        },
    }


def members(cluster: SimCluster, gang: str) -> list[Obj]:
    items, _ = cluster.store.list("pods", "training")
    found = [p for p in items if p["metadata"]["labels"].get(GANG_LABEL) == gang]
    return sorted(found, key=lambda p: p["metadata"]["name"])


def test_a_gang_is_requeued_as_a_whole_and_placed_all_or_nothing(clock: FakeClock) -> None:
    cluster = SimCluster(clock)
    for i in range(3):
        cluster.add_node(f"h100-{i}", "train", 8)
    cluster.store.create("batch/jobs", gang_job("dit", 2))
    run_for(cluster, clock, 1.0)
    first = members(cluster, "dit")
    assert len(first) == 2
    assert {p["metadata"]["annotations"][GANG_GENERATION] for p in first} == {"1"}
    assert all(p["status"]["phase"] == "Running" for p in first)
    job = cluster.store.get("batch/jobs", "training", "dit")
    assert job["status"]["active"] == 2
    assert job["status"]["ready"] == 2

    cluster.delete_pod("training", first[0]["metadata"]["name"], grace_period_seconds=30)
    cluster.tick()
    everyone = members(cluster, "dit")
    old = [p for p in everyone if p["metadata"]["annotations"][GANG_GENERATION] == "1"]
    new = [p for p in everyone if p["metadata"]["annotations"][GANG_GENERATION] == "2"]
    assert len(old) == 2 and all(is_terminating(p) for p in old)
    assert len(new) == 2
    # Only one node is free while the old members shut down: nobody is placed half-way.
    assert all(not p["spec"].get("nodeName") for p in new)
    events, _ = cluster.store.list("events", "training")
    (requeued,) = [e for e in events if e["reason"] == "GangRequeued"]
    assert requeued["involvedObject"]["kind"] == "Job"
    assert first[0]["metadata"]["name"] in requeued["message"]

    run_for(cluster, clock, 3.0)
    again = members(cluster, "dit")
    assert len(again) == 2
    assert {p["metadata"]["annotations"][GANG_GENERATION] for p in again} == {"2"}
    assert all(p["status"]["phase"] == "Running" for p in again)
    assert len({p["spec"]["nodeName"] for p in again}) == 2


def test_removing_a_node_deletes_its_pods_requeues_gangs_and_moves_replicas(
    clock: FakeClock,
) -> None:
    cluster = SimCluster(clock)
    for i in range(3):
        cluster.add_node(f"h100-{i}", "train", 8)
    for i in range(2):
        cluster.add_node(f"infer-{i}", "infer", 8)
    cluster.store.create("batch/jobs", gang_job("llm", 2))
    cluster.store.create("apps/replicasets", replicaset("web", 2))
    run_for(cluster, clock, 1.0)
    victim = members(cluster, "llm")[0]["spec"]["nodeName"]
    web_node = pods(cluster, "web")[0]["spec"]["nodeName"]

    cluster.remove_node(victim)
    cluster.remove_node(web_node)
    assert cluster.store.find("nodes", "", victim) is None
    items, _ = cluster.store.list("pods")
    assert not [p for p in items if p["spec"].get("nodeName") in (victim, web_node)]
    assert sorted(cluster.pools()["train"]) == sorted({"h100-0", "h100-1", "h100-2"} - {victim})

    run_for(cluster, clock, 40.0)
    gang = members(cluster, "llm")
    assert {p["metadata"]["annotations"][GANG_GENERATION] for p in gang} == {"2"}
    assert all(p["status"]["phase"] == "Running" for p in gang)
    assert victim not in {p["spec"]["nodeName"] for p in gang}
    web = live(cluster, "web")
    assert len(web) == 2
    assert {p["spec"]["nodeName"] for p in web} == {"infer-0", "infer-1"} - {web_node}


def test_pods_of_an_unreachable_node_stop_counting_as_healthy_until_it_returns(
    serving: SimCluster, clock: FakeClock
) -> None:
    node = pods(serving, "web")[0]["spec"]["nodeName"]
    serving.set_node_condition(
        node, "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
    )
    serving.tick()
    lost = next(p for p in pods(serving, "web") if p["spec"]["nodeName"] == node)
    assert (
        next(c for c in lost["status"]["conditions"] if c["type"] == "Ready")["status"] == "False"
    )
    status = serving.store.get("policy/poddisruptionbudgets", NS, "web-pdb")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (2, 0)

    serving.set_node_condition(
        node, "Ready", "True", "KubeletReady", "kubelet is posting ready status"
    )
    serving.tick()
    status = serving.store.get("policy/poddisruptionbudgets", NS, "web-pdb")["status"]
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (3, 1)
