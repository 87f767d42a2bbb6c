"""The simulator's Cluster API through stock kubectl: the CRD resources are discoverable and
listed across namespaces, and `kubectl delete machine` makes the MachineSet replace it — a new
Machine whose Node registers and becomes its `status.nodeRef`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from remediator.kube.client import KubeClient
from remediator.providers.base import ReplacementHeld
from remediator.providers.clusterapi import ClusterApiProvider
from tests.fixtures.sim import SimHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_kubectl_lists_and_deletes_machines_and_the_machineset_replaces_them(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.3, cloud="clusterapi")
    resources = sim.kubectl("api-resources", "--api-group=cluster.x-k8s.io", "-o", "name")
    assert set(resources.split()) == {
        "machines.cluster.x-k8s.io",
        "machinesets.cluster.x-k8s.io",
        "machinedeployments.cluster.x-k8s.io",
        "clusters.cluster.x-k8s.io",
    }
    table = sim.kubectl("get", "machines", "-A")
    assert table.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert "h100-train-0000" in table

    sim.kubectl("delete", "machine", "-n", "default", "h100-train-0000")
    deadline = time.monotonic() + 60
    while True:
        items = json.loads(sim.kubectl("get", "machines", "-A", "-o", "json"))["items"]
        names = {m["metadata"]["name"] for m in items}
        new = [
            m
            for m in items
            if m["metadata"]["name"].startswith("h100-train-")
            and m["metadata"]["name"] not in {f"h100-train-{i:04d}" for i in range(4)}
        ]
        ref = (new[0].get("status") or {}).get("nodeRef") if new else None
        if ref:
            break
        assert time.monotonic() < deadline, items
        time.sleep(0.2)
    assert "h100-train-0000" not in names and len(items) == 4 and len(new) == 1
    node = json.loads(sim.kubectl("get", "node", ref["name"], "-o", "json"))
    assert node["metadata"]["annotations"]["cluster.x-k8s.io/machine"] == new[0]["metadata"]["name"]
    nodes = sim.kubectl("get", "nodes", "-o", "name").split()
    assert "node/h100-train-0000" not in nodes and len(nodes) == 4


def paused_condition(sim: SimHandle) -> str | None:
    (ms,) = json.loads(sim.kubectl("get", "machinesets", "-n", "default", "-o", "json"))["items"][
        :1
    ] or [{}]
    conditions = ((ms.get("status") or {}).get("v1beta2") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Paused"), None)


def test_a_paused_cluster_holds_the_replacement_naming_the_cluster(
    sim_factory: Callable[..., SimHandle],
) -> None:
    """Issue 22 item 13: `clusterctl move` pauses the Cluster (spec.paused), which stops the
    MachineSet controller; the provider must hold instead of deleting a Machine nothing would
    replace, and go ahead once the Cluster is resumed."""
    sim = sim_factory(nodes=4, provision_delay=0.3, cloud="clusterapi")
    clusters = json.loads(sim.kubectl("get", "clusters", "-A", "-o", "json"))["items"]
    assert [(c["metadata"]["name"], c["spec"]["paused"]) for c in clusters] == [("sim", False)]
    sim.kubectl(
        "patch", "cluster", "sim", "-n", "default", "--type", "merge",
        "-p", '{"spec": {"paused": true}}',
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while paused_condition(sim) != "True":  # the MachineSet controller saw the pause
        assert time.monotonic() < deadline, sim.kubectl("get", "machinesets", "-A", "-o", "yaml")
        time.sleep(0.2)
    before = sim.kubectl("get", "machines", "-A", "-o", "name").split()
    with KubeClient.from_kubeconfig(sim.kubeconfig) as kube:
        provider = ClusterApiProvider(kube)
        with pytest.raises(ReplacementHeld) as held:
            provider.request_replacement("h100-train", "h100-train-0000", "key-1", "test")
        assert str(held.value).startswith(
            "Machine default/h100-train-0000: Cluster default/sim is paused (spec.paused"
        )
        assert sim.kubectl("get", "machines", "-A", "-o", "name").split() == before

        sim.kubectl(
            "patch", "cluster", "sim", "-n", "default", "--type", "merge",
            "-p", '{"spec": {"paused": false}}',
        )  # fmt: skip
        op = provider.request_replacement("h100-train", "h100-train-0000", "key-1", "test")
        assert op.detail["old_machine"] == "h100-train-0000"
    assert (
        "machine.cluster.x-k8s.io/h100-train-0000"
        not in sim.kubectl("get", "machines", "-A", "-o", "name").split()
    )
