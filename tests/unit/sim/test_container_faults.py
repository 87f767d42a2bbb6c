"""The simulated kubelet plays a crash-looping or unready container as the real one reports it
(restartCount, lastState, CrashLoopBackOff with its doubling back-off, the Ready condition), on
the node agent's DaemonSet pod the seeded fleet runs; the controller's parser reads it back."""

from __future__ import annotations

from remediator.clock import FakeClock
from remediator.kube.agent_pods import agent_pod
from remediator.sim.fleet import AGENT_LABELS, plan
from remediator.sim.kube.api.kobj import is_ready
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import SimCluster

SELECTOR = ",".join(f"{k}={v}" for k, v in AGENT_LABELS.items())


def agent_on(cluster: SimCluster, node: str) -> Obj:
    pods, _ = cluster.store.list("pods")
    (found,) = [
        p
        for p in pods
        if p["spec"].get("nodeName") == node
        and p["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "agent"
    ]
    return found


def run(cluster: SimCluster, clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    for _ in range(int(seconds / step)):
        clock.advance(step)
        cluster.tick()


def test_every_node_runs_a_ready_agent_pod() -> None:
    cluster = SimCluster(FakeClock())
    cluster.seed(plan(4))
    for node in cluster.store.list("nodes")[0]:
        pod = agent_on(cluster, node["metadata"]["name"])
        assert pod["metadata"]["namespace"] == "remediator" and is_ready(pod)


def test_a_crashing_agent_backs_off_as_the_kubelet_does() -> None:
    clock = FakeClock()
    cluster = SimCluster(clock)
    cluster.seed(plan(4))
    node = cluster.store.list("nodes")[0][0]["metadata"]["name"]
    assert cluster.set_container_fault(node, SELECTOR, "crash") == 1

    run(cluster, clock, 1.5)  # ran one second, exited, restarted at once (the first time)
    run(cluster, clock, 1.5)  # exited again: now the kubelet backs off 10 s
    pod = agent_on(cluster, node)
    (container,) = pod["status"]["containerStatuses"]
    assert container["restartCount"] == 1
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert container["state"]["waiting"]["message"].startswith("back-off 10s restarting")
    assert container["lastState"]["terminated"]["exitCode"] == 1
    assert not is_ready(pod)
    found = agent_pod(pod)
    assert found is not None
    assert found[0] == node
    assert (found[1].waiting, found[1].restarts, found[1].ready) == ("CrashLoopBackOff", 1, False)
    assert found[1].last_exit == "Error, exit 1"

    run(cluster, clock, 12)  # restarted after 10 s, crashed again: 20 s this time
    (container,) = agent_on(cluster, node)["status"]["containerStatuses"]
    assert container["restartCount"] == 2
    assert "back-off 20s" in container["state"]["waiting"]["message"]

    cluster.set_container_fault(node, SELECTOR, None)
    run(cluster, clock, 21)  # the next start stays up
    pod = agent_on(cluster, node)
    (container,) = pod["status"]["containerStatuses"]
    assert container["restartCount"] == 3 and "running" in container["state"]
    assert is_ready(pod) and container["ready"]
    events = [e["reason"] for e in cluster.store.list("events")[0]]
    assert "BackOff" in events


def test_an_unready_agent_keeps_running_until_its_probe_passes_again() -> None:
    clock = FakeClock()
    cluster = SimCluster(clock)
    cluster.seed(plan(4))
    node = cluster.store.list("nodes")[0][0]["metadata"]["name"]
    cluster.set_container_fault(node, SELECTOR, "unready")
    run(cluster, clock, 1)
    pod = agent_on(cluster, node)
    (container,) = pod["status"]["containerStatuses"]
    assert not is_ready(pod) and "running" in container["state"] and not container["ready"]
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ContainersNotReady"
    cluster.clear_container_faults(node)
    run(cluster, clock, 1)
    assert is_ready(agent_on(cluster, node))
