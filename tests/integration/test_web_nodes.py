"""The node page answers "what happened to node X": the node as the (simulated) cluster has it
now, remediations and signals within a time window and paged to the end (nothing silently
kept to the newest 100), replaced-by / replacement-of links, and values with their units."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from remediator.errors import NotFoundError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.signals.model import Signal, SignalKind
from tests.fixtures.sim import SimHandle
from tests.fixtures.web import READONLY_TOKEN, Console
from tests.integration.engine_support import wait_for

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def _node(client: TestClient, name: str, **params: Any) -> dict[str, Any]:
    response = client.get(f"/api/v1/nodes/{name}", params=params, headers=READONLY)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_signals_page_to_the_end_of_the_window(client: TestClient, console: Console) -> None:
    now = console.clock.now()
    old_xid = Signal(
        node="gpu-node-01",
        kind=SignalKind.XID,
        source="dcgm",
        observed_at=now - timedelta(hours=30),
        gpu=5,
        code=79,
    )
    temps = [
        Signal(
            node="gpu-node-01",
            kind=SignalKind.THERMAL,
            source="dcgm",
            observed_at=now - timedelta(minutes=i),
            gpu=i % 8,
            value=80.0 + i % 5,
        )
        for i in range(130)
    ]
    console.repository.insert_signals([old_xid, *temps])

    first = _node(client, "gpu-node-01")
    assert first["signals_total"] == 132  # 130 readings, the old XID, the seeded XID 79
    assert len(first["signals"]) == 50
    assert first["signals"][0]["value_text"].endswith(" °C")
    seen = [s["id"] for s in first["signals"]]
    cursor = first["signals_next"]
    while cursor:
        page = _node(client, "gpu-node-01", signals_cursor=cursor)
        seen += [s["id"] for s in page["signals"]]
        cursor = page["signals_next"]
    assert len(seen) == len(set(seen)) == 132
    # The window narrows it: the last 24 hours leave out the 30-hour-old XID.
    day = _node(client, "gpu-node-01", **{"from": (now - timedelta(days=1)).isoformat()})
    assert day["signals_total"] == 131
    html = client.get("/nodes/gpu-node-01", headers=READONLY).text
    assert "(50 of 132 in the window)" in html and "older signals »" in html


def test_remediations_page_within_the_window(client: TestClient, console: Console) -> None:
    body = _node(client, "gpu-node-01", limit=1)
    assert body["remediations_total"] == 1 and body["remediations_next"] is None
    assert body["remediations"][0]["id"] == console.ids["done"]
    now = console.clock.now()
    later = _node(
        client,
        "gpu-node-01",
        **{
            "from": (now + timedelta(hours=1)).isoformat(),
            "to": (now + timedelta(hours=2)).isoformat(),
        },
    )
    assert later["remediations_total"] == 0 and later["signals_total"] == 0
    backwards = client.get(
        "/api/v1/nodes/gpu-node-01",
        params={"from": now.isoformat(), "to": (now - timedelta(hours=1)).isoformat()},
        headers=READONLY,
    )
    # #39 item 23: a start after the end is a window with nothing in it, as the list's
    # `created_from` after `created_to` is (a rule between two parameters no schema can state).
    assert backwards.status_code == 200, backwards.text
    assert backwards.json()["remediations_total"] == backwards.json()["signals_total"] == 0
    bad = client.get("/api/v1/nodes/gpu-node-01?signals_cursor=nope", headers=READONLY)
    assert bad.status_code == 422 and "signals_cursor" in bad.text


def test_replacement_links_between_old_and_new_node(client: TestClient, console: Console) -> None:
    old = _node(client, "gpu-node-01")
    assert old["replaced_by"] == [{"remediation_id": console.ids["done"], "node": "gpu-node-91"}]
    assert old["replacement_of"] is None
    new = _node(client, "gpu-node-91")
    assert new["replacement_of"] == {"remediation_id": console.ids["done"], "node": "gpu-node-01"}
    html = client.get("/nodes/gpu-node-91", headers=READONLY).text
    assert 'href="/nodes/gpu-node-01"' in html


def test_without_cluster_access_the_page_says_so(client: TestClient) -> None:
    status = _node(client, "gpu-node-01")["status"]
    assert status == {
        **status,
        "found": False,
        "error": "this console has no access to the cluster",
    }


def test_node_status_comes_from_the_cluster(
    client: TestClient, console: Console, sim_factory: Callable[..., SimHandle]
) -> None:
    sim = sim_factory(nodes=2, gpus_per_node=8)
    kube = KubeClient.connect(sim.kubeconfig)

    def read_node(name: str) -> Node | None:
        try:
            return kube.get_node(name)
        except NotFoundError:
            return None

    console.deps.read_node = read_node
    name = kube.list_nodes()[0].name
    sim.kubectl("cordon", name)
    sim.kubectl("taint", "nodes", name, "example.com/maintenance=yes:NoSchedule")
    # The node lifecycle controller adds the cordon's taint after the cordon, as Kubernetes'.
    unschedulable = "node.kubernetes.io/unschedulable:NoSchedule"
    wait_for(lambda: unschedulable in _node(client, name)["status"]["taints"], 90, unschedulable)
    status = _node(client, name)["status"]
    assert status["found"] and status["ready"] is True and status["cordoned"] is True
    assert "example.com/maintenance=yes:NoSchedule" in status["taints"]
    assert status["gpus"] == 8
    assert status["pool"] == kube.get_node(name).labels.get(console.deps.settings.pool_label)
    assert status["pool"]
    html = client.get(f"/nodes/{name}", headers=READONLY).text
    assert "cordoned" in html and "8 GPUs" in html
    gone = _node(client, "gpu-node-91")["status"]  # replaced away: its history stays shown
    assert gone["found"] is False and "no node of this name" in gone["error"]
    # #39 item 9: a name nothing knows got an empty page that read like a healthy node.
    unknown = client.get("/api/v1/nodes/gpu-node-77", headers=READONLY)
    assert unknown.status_code == 404, unknown.text
    assert unknown.json()["reason"] == (
        "gpu-node-77: no such node (the cluster has none of this name, and no remediation, "
        "signal or agent of this store names it)"
    )
    page = client.get("/nodes/gpu-node-77", headers=READONLY)
    assert page.status_code == 404 and "gpu-node-77: no such node" in page.text
