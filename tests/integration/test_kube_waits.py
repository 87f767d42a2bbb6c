"""Event-driven waits against the simulator's real watch streams: a change to a pod or a node is
reported with its node's name as it happens. (The 410 Gone path is in the unit tests: the
simulator keeps 50,000 events of history, too many to outrun here.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from remediator.kube.client import KubeClient
from remediator.kube.informer import NodeInformer
from remediator.kube.waits import PODS, NodeActivity
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

NODE, OTHER = "h100-train-0000", "a100-infer-0000"


@pytest.fixture
def kube(sim: SimHandle) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(sim.kubeconfig) as client:
        yield client


class Changes:
    def __init__(self) -> None:
        self.nodes: set[str] = set()
        self._arrived = threading.Condition()

    def __call__(self, node: str) -> None:
        with self._arrived:
            self.nodes.add(node)
            self._arrived.notify_all()

    def wait_for(self, node: str, timeout: float = 60.0) -> bool:
        with self._arrived:
            return self._arrived.wait_for(lambda: node in self.nodes, timeout)


def test_pod_and_node_changes_are_reported_with_their_node(
    sim: SimHandle, kube: KubeClient
) -> None:
    changes = Changes()
    resynced = threading.Event()
    activity = NodeActivity(kube, changes, resynced.set)
    activity.start()
    try:
        assert resynced.wait(10), "the watches never started"
        pod = next(p for p in kube.list_pods_on_node(NODE) if p.namespace == "training")
        changes.nodes.clear()
        kube.set_pod_annotations(pod.namespace, pod.name, {"example.com/touched": "yes"})
        assert changes.wait_for(NODE)
        kube.set_node_annotations(OTHER, {"example.com/touched": "yes"})
        assert changes.wait_for(OTHER)
    finally:
        activity.stop()


def test_with_a_node_informer_nodes_are_heard_from_its_watch_alone(
    sim: SimHandle, kube: KubeClient
) -> None:
    """The controller's arrangement: pods from NodeActivity, nodes from the informer's one watch
    (a second node watch would read every node status update twice)."""
    changes = Changes()
    resynced = threading.Event()
    informer = NodeInformer(kube)
    informer.subscribe(changes, resynced.set)
    activity = NodeActivity(kube, changes, resynced.set, watch_nodes=False)
    informer.start()
    before = set(threading.enumerate())
    activity.start()
    try:
        assert resynced.wait(10) and informer.wait_synced(10)
        assert {t.name for t in set(threading.enumerate()) - before} == {f"watch {PODS}"}
        pod = next(p for p in kube.list_pods_on_node(NODE) if p.namespace == "training")
        changes.nodes.clear()
        kube.set_pod_annotations(pod.namespace, pod.name, {"example.com/touched": "yes"})
        assert changes.wait_for(NODE)
        kube.set_node_annotations(OTHER, {"example.com/touched": "yes"})
        assert changes.wait_for(OTHER)
    finally:
        activity.stop()
        informer.stop()
