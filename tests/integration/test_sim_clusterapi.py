"""The simulator's Cluster API through stock kubectl: the CRD resources are discoverable and
listed across namespaces, and `kubectl delete machine` makes the MachineSet replace it — a new
Machine whose Node registers and becomes its `status.nodeRef`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

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
