"""SimCluster pod lifecycle on a fake clock: scheduling and start-up, graceful deletion (SIGTERM,
exit after the workload's shutdown time, SIGKILL at the deadline, shortened grace), checkpoint
answers, node conditions, taints and heartbeats."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta

import pytest

from remediator.clock import FakeClock
from remediator.sim.kube.api.kobj import (
    CHECKPOINT_DONE,
    CHECKPOINT_REQUESTED,
    CHECKPOINT_SECONDS,
    SHUTDOWN_SECONDS,
    parse_time,
    rfc3339,
)
from remediator.sim.kube.api.store import Conflict, NotFound, Obj, WatchEvent
from remediator.sim.kube.controllers.cluster import GPU_RESOURCE, SimCluster
from remediator.sim.kube.controllers.kubelet import LEASE_NAMESPACE, LEASES

NS = "work"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(clock: FakeClock) -> SimCluster:
    sim = SimCluster(clock)
    sim.add_node("node-a", "h100-train", 8)
    return sim


def run_for(cluster: SimCluster, clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    cluster.tick()
    for _ in range(round(seconds / step)):
        clock.advance(step)
        cluster.tick()


def bare_pod(
    name: str, gpus: int = 1, annotations: dict[str, str] | None = None, **spec: object
) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                }
            ],
            **spec,
        },
    }


def events_about(cluster: SimCluster, name: str) -> list[Obj]:
    events, _ = cluster.store.list("events")
    found = [e for e in events if e["involvedObject"]["name"] == name]
    return sorted(found, key=lambda e: e["metadata"]["name"])


def started(cluster: SimCluster, clock: FakeClock, pod: Obj) -> Obj:
    cluster.store.create("pods", pod)
    run_for(cluster, clock, 1.0)
    current = cluster.store.get("pods", NS, pod["metadata"]["name"])
    assert current["status"]["phase"] == "Running"
    return current


def final_statuses(cluster: SimCluster) -> dict[str, Obj]:
    """The last status each pod had before it was removed, as a watcher saw it."""
    seen: dict[str, Obj] = {}

    def keep(event: WatchEvent) -> None:
        seen[event.object["metadata"]["name"]] = event.object

    cluster.store.subscribe("pods", keep)
    return seen


def test_a_pod_is_bound_then_started_after_its_startup_time(
    cluster: SimCluster, clock: FakeClock
) -> None:
    cluster.store.create(
        "pods", bare_pod("p", annotations={"sim.remediator.io/startup-seconds": "2"})
    )
    cluster.tick()
    pod = cluster.store.get("pods", NS, "p")
    assert pod["spec"]["nodeName"] == "node-a"
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"] == {
        "waiting": {"reason": "ContainerCreating"}
    }
    run_for(cluster, clock, 1.5)
    assert cluster.store.get("pods", NS, "p")["status"]["phase"] == "Pending"
    run_for(cluster, clock, 0.5)
    pod = cluster.store.get("pods", NS, "p")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"].startswith("10.")
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    reasons = [e["reason"] for e in events_about(cluster, "p")]
    assert reasons == ["Scheduled", "Started"]


def test_pods_on_one_node_get_distinct_ips(cluster: SimCluster, clock: FakeClock) -> None:
    """A node's CNI hands each pod its own address in the node's pod CIDR: 100 pods (the
    kubelet's default limit is 110) on one /24 would share some if the address were a hash."""
    for i in range(100):
        cluster.store.create("pods", bare_pod(f"p{i}", gpus=0))
    run_for(cluster, clock, 1.0)
    pods, _ = cluster.store.list("pods", NS)
    assert {p["status"]["phase"] for p in pods} == {"Running"}
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == len(ips) == 100
    cidr = cluster.store.get("nodes", "", "node-a")["spec"]["podCIDR"]
    assert all(ip.startswith(cidr.rsplit(".", 1)[0] + ".") for ip in ips)


def test_an_address_is_given_back_when_its_pod_goes(cluster: SimCluster, clock: FakeClock) -> None:
    """Addresses are not leaked: after 100 pods have come and gone, 100 more still fit the /24."""
    for round_ in range(3):
        for i in range(100):
            cluster.store.create("pods", bare_pod(f"r{round_}-{i}", gpus=0))
        run_for(cluster, clock, 1.0)
        pods, _ = cluster.store.list("pods", NS)
        ips = [p["status"]["podIP"] for p in pods]
        assert len(set(ips)) == len(ips) == 100
        for pod in pods:
            cluster.delete_pod(NS, pod["metadata"]["name"], grace_period_seconds=0)
        run_for(cluster, clock, 1.0)
        assert cluster.store.list("pods", NS)[0] == []


def test_a_pod_waits_with_a_warning_when_its_node_has_no_address_left(
    cluster: SimCluster, clock: FakeClock
) -> None:
    """Bound past the scheduler (spec.nodeName), 252 pods overflow the node's 250 pod addresses:
    the last two stay Pending with FailedCreatePodSandBox, as a real kubelet's would."""
    for i in range(252):
        cluster.store.create("pods", bare_pod(f"p{i}", gpus=0, nodeName="node-a"))
    run_for(cluster, clock, 1.0)
    pods, _ = cluster.store.list("pods", NS)
    assert Counter(p["status"]["phase"] for p in pods) == {"Running": 250, "Pending": 2}
    events, _ = cluster.store.list("events")
    failed = [e for e in events if e["reason"] == "FailedCreatePodSandBox"]
    assert len(failed) == 2
    assert {e["type"] for e in failed} == {"Warning"}
    assert "no free address" in failed[0]["message"]


def test_delete_sends_sigterm_and_the_pod_goes_when_its_process_exits(
    cluster: SimCluster, clock: FakeClock
) -> None:
    started(cluster, clock, bare_pod("p", annotations={SHUTDOWN_SECONDS: "5"}))
    seen = final_statuses(cluster)
    t0 = clock.now()
    pod = cluster.delete_pod(NS, "p")
    assert pod["metadata"]["deletionTimestamp"] == rfc3339(t0 + timedelta(seconds=30))
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    cluster.tick()
    (killing,) = [e for e in events_about(cluster, "p") if e["reason"] == "Killing"]
    assert "SIGTERM" in killing["message"]
    assert "grace period 30s" in killing["message"]
    assert rfc3339(t0) in killing["message"]
    assert killing["involvedObject"]["kind"] == "Pod"
    assert killing["involvedObject"]["uid"] == pod["metadata"]["uid"]
    run_for(cluster, clock, 4.5)
    assert cluster.store.find("pods", NS, "p") is not None
    run_for(cluster, clock, 0.5)
    assert cluster.store.find("pods", NS, "p") is None
    last = seen["p"]
    assert last["status"]["phase"] == "Succeeded"
    terminated = last["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert not any("SIGKILL" in e["message"] for e in events_about(cluster, "p"))


def test_a_process_slower_than_the_grace_period_is_killed_at_the_deadline(
    cluster: SimCluster, clock: FakeClock
) -> None:
    started(cluster, clock, bare_pod("p", annotations={SHUTDOWN_SECONDS: "60"}))
    seen = final_statuses(cluster)
    cluster.delete_pod(NS, "p", grace_period_seconds=10)
    run_for(cluster, clock, 9.5)
    assert cluster.store.find("pods", NS, "p") is not None
    run_for(cluster, clock, 0.5)
    assert cluster.store.find("pods", NS, "p") is None
    kills = [e for e in events_about(cluster, "p") if "SIGKILL" in e["message"]]
    assert len(kills) == 1
    assert kills[0]["type"] == "Warning"
    assert seen["p"]["status"]["phase"] == "Failed"
    assert seen["p"]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137


def test_a_second_delete_may_only_shorten_the_grace_period(
    cluster: SimCluster, clock: FakeClock
) -> None:
    started(
        cluster,
        clock,
        bare_pod("p", annotations={SHUTDOWN_SECONDS: "60"}, terminationGracePeriodSeconds=120),
    )
    t0 = clock.now()
    cluster.delete_pod(NS, "p")
    run_for(cluster, clock, 2.0)
    longer = cluster.delete_pod(NS, "p", grace_period_seconds=300)
    assert longer["metadata"]["deletionGracePeriodSeconds"] == 120
    shorter = cluster.delete_pod(NS, "p", grace_period_seconds=5)
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    assert shorter["metadata"]["deletionTimestamp"] == rfc3339(t0 + timedelta(seconds=5))
    run_for(cluster, clock, 3.0)
    assert cluster.store.find("pods", NS, "p") is None
    assert any("SIGKILL" in e["message"] for e in events_about(cluster, "p"))


def test_grace_zero_and_unscheduled_pods_are_removed_at_once(
    cluster: SimCluster, clock: FakeClock
) -> None:
    started(cluster, clock, bare_pod("running"))
    gone = cluster.delete_pod(NS, "running", grace_period_seconds=0)
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 0
    assert cluster.store.find("pods", NS, "running") is None
    cluster.store.create("pods", bare_pod("too-big", gpus=16))
    cluster.tick()
    pending = cluster.store.get("pods", NS, "too-big")
    assert "spec" in pending and not pending["spec"].get("nodeName")
    cluster.delete_pod(NS, "too-big")
    assert cluster.store.find("pods", NS, "too-big") is None


def test_delete_checks_the_uid_precondition_and_reports_missing_pods(
    cluster: SimCluster, clock: FakeClock
) -> None:
    started(cluster, clock, bare_pod("p"))
    with pytest.raises(Conflict) as err:
        cluster.delete_pod(NS, "p", uid_precondition="not-the-uid")
    assert err.value.status()["code"] == 409
    assert "Precondition failed: UID in precondition: not-the-uid" in err.value.message
    assert cluster.store.get("pods", NS, "p")["metadata"].get("deletionTimestamp") is None
    with pytest.raises(NotFound):
        cluster.delete_pod(NS, "nope")


def test_checkpoint_requests_are_answered_after_the_workloads_own_delay(
    cluster: SimCluster, clock: FakeClock
) -> None:
    started(cluster, clock, bare_pod("answers", annotations={CHECKPOINT_SECONDS: "5"}))
    started(cluster, clock, bare_pod("silent"))
    requested = rfc3339(clock.now())
    for name in ("answers", "silent"):

        def ask(pod: Obj) -> None:
            pod["metadata"].setdefault("annotations", {})[CHECKPOINT_REQUESTED] = requested

        cluster.store.mutate("pods", NS, name, ask)
    run_for(cluster, clock, 4.5)
    assert (
        CHECKPOINT_DONE not in cluster.store.get("pods", NS, "answers")["metadata"]["annotations"]
    )
    run_for(cluster, clock, 0.5)
    done = cluster.store.get("pods", NS, "answers")["metadata"]["annotations"][CHECKPOINT_DONE]
    assert done == rfc3339(clock.now())
    run_for(cluster, clock, 60)
    assert CHECKPOINT_DONE not in cluster.store.get("pods", NS, "silent")["metadata"]["annotations"]


def test_node_conditions_move_transition_time_only_on_change_and_drive_taints(
    cluster: SimCluster, clock: FakeClock
) -> None:
    def cond(type_: str) -> Obj:
        node = cluster.store.get("nodes", "", "node-a")
        return next(c for c in node["status"]["conditions"] if c["type"] == type_)

    first = cond("GpuXidError")
    assert first["status"] == "False"
    clock.advance(5)
    cluster.set_node_condition(
        "node-a", "GpuXidError", "True", "XID79", "GPU has fallen off the bus"
    )
    flipped = cond("GpuXidError")
    assert flipped["lastTransitionTime"] == rfc3339(clock.now())
    clock.advance(5)
    cluster.set_node_condition("node-a", "GpuXidError", "True", "XID79", "again")
    assert cond("GpuXidError")["lastTransitionTime"] == flipped["lastTransitionTime"]
    assert cond("GpuXidError")["message"] == "again"

    cluster.set_node_condition("node-a", "Ready", "False", "KubeletNotReady", "PLEG is not healthy")
    taints = cluster.store.get("nodes", "", "node-a")["spec"]["taints"]
    assert {(t["key"], t["effect"]) for t in taints} == {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute"),
    }
    cluster.set_node_condition(
        "node-a", "Ready", "True", "KubeletReady", "kubelet is posting ready status"
    )
    assert "taints" not in cluster.store.get("nodes", "", "node-a")["spec"]


def test_kubelets_heartbeat_through_leases_and_post_status_every_five_minutes(
    cluster: SimCluster, clock: FakeClock
) -> None:
    def heartbeat() -> str:
        node = cluster.store.get("nodes", "", "node-a")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        return str(ready["lastHeartbeatTime"])

    def renewed() -> datetime:
        lease = cluster.store.get(LEASES, LEASE_NAMESPACE, "node-a")
        assert lease["spec"]["holderIdentity"] == "node-a"
        assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
        return parse_time(lease["spec"]["renewTime"])

    start = heartbeat()
    node_version = cluster.store.get("nodes", "", "node-a")["metadata"]["resourceVersion"]
    run_for(cluster, clock, 45, step=1.0)
    assert clock.now() - timedelta(seconds=41) <= renewed()
    # An unchanged status is not posted again within five minutes: a node watch stays quiet.
    assert heartbeat() == start
    assert cluster.store.get("nodes", "", "node-a")["metadata"]["resourceVersion"] == node_version
    run_for(cluster, clock, 300, step=5.0)
    fresh = heartbeat()
    assert fresh > start
    assert clock.now() - timedelta(seconds=341) <= parse_time(fresh)

    cluster.set_node_condition(
        "node-a", "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
    )
    frozen, lease_frozen = heartbeat(), renewed()
    run_for(cluster, clock, 400, step=5.0)
    assert heartbeat() == frozen and renewed() == lease_frozen


def test_a_node_joins_not_ready_and_takes_pods_only_once_ready(clock: FakeClock) -> None:
    cluster = SimCluster(clock)
    node = cluster.add_node("late", "h100-train", 8, labels={"team": "x"}, ready_after=10)
    assert node["metadata"]["labels"]["team"] == "x"
    assert node["metadata"]["labels"]["simcloud.io/nodepool"] == "h100-train"
    assert node["status"]["allocatable"][GPU_RESOURCE] == "8"
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.")
    cluster.store.create("pods", bare_pod("p"))
    run_for(cluster, clock, 9.5)
    assert not cluster.store.get("pods", NS, "p")["spec"].get("nodeName")
    run_for(cluster, clock, 1.5)
    pod = cluster.store.get("pods", NS, "p")
    assert pod["spec"]["nodeName"] == "late"
    assert pod["status"]["phase"] == "Running"


def test_not_ready_nodes_evict_pods_after_their_toleration_seconds(
    cluster: SimCluster, clock: FakeClock
) -> None:
    # What the DefaultTolerationSeconds admission plugin adds to every pod.
    tolerations = [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        }
    ]
    started(cluster, clock, bare_pod("p", tolerations=tolerations))
    started(cluster, clock, bare_pod("intolerant"))
    cluster.set_node_condition("node-a", "Ready", "False", "KubeletNotReady", "runtime down")
    cluster.tick()
    assert cluster.store.get("pods", NS, "intolerant")["metadata"]["deletionTimestamp"]
    run_for(cluster, clock, 299)
    assert cluster.store.get("pods", NS, "p")["metadata"].get("deletionTimestamp") is None
    run_for(cluster, clock, 1.0)
    evicted = cluster.store.get("pods", NS, "p")
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 30
    assert any(e["reason"] == "TaintManagerEviction" for e in events_about(cluster, "p"))


def test_terminating_pods_on_an_unreachable_node_stay_until_out_of_service(
    cluster: SimCluster, clock: FakeClock
) -> None:
    started(cluster, clock, bare_pod("p", tolerations=[{"operator": "Exists"}]))
    cluster.set_node_condition(
        "node-a", "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
    )
    cluster.delete_pod(NS, "p", grace_period_seconds=5)
    run_for(cluster, clock, 30)
    assert cluster.store.get("pods", NS, "p")["metadata"]["deletionTimestamp"]

    def out_of_service(node: Obj) -> None:
        node["spec"].setdefault("taints", []).append(
            {
                "key": "node.kubernetes.io/out-of-service",
                "value": "nodeshutdown",
                "effect": "NoExecute",
            }
        )

    cluster.store.mutate("nodes", "", "node-a", out_of_service)
    cluster.tick()
    assert cluster.store.find("pods", NS, "p") is None


def test_tick_callbacks_see_the_clock_and_old_events_expire(
    cluster: SimCluster, clock: FakeClock
) -> None:
    seen: list[object] = []
    cluster.on_tick(seen.append)
    started(cluster, clock, bare_pod("p"))
    assert seen[-1] == clock.now()
    assert events_about(cluster, "p")
    run_for(cluster, clock, 2 * 3600, step=600)
    assert events_about(cluster, "p") == []


def test_start_runs_ticks_in_the_background_until_stopped() -> None:
    cluster = SimCluster()
    cluster.add_node("live", "h100-train", 8)
    cluster.store.create(
        "pods", bare_pod("p", annotations={"sim.remediator.io/startup-seconds": "0"})
    )
    cluster.start(interval=0.01)
    try:
        deadline = time.monotonic() + 30
        while cluster.store.get("pods", NS, "p").get("status", {}).get("phase") != "Running":
            assert time.monotonic() < deadline, "the background loop never started the pod"
            time.sleep(0.01)
    finally:
        cluster.stop()
    cluster.store.create("pods", bare_pod("later"))
    time.sleep(0.05)
    assert not cluster.store.get("pods", NS, "later")["spec"].get("nodeName")
