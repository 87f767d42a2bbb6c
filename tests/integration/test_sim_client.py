"""The official `kubernetes` Python client against the real `remediator sim serve`: what
remediator's kube/ layer relies on must behave as on a real API server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.fixtures.sim import SimHandle, start_sim

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    handle = start_sim(tmp_path_factory.mktemp("sim-client"), nodes=4)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def api(cluster: SimHandle) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture
def core(api: client.ApiClient) -> Any:
    # Typed as Any: every field of the client's models is Optional, and these tests assert
    # on the values rather than narrowing each one.
    return client.CoreV1Api(api)


def wait_for(check: Callable[[], Any], timeout: float = 120.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def body_of(exc: ApiException) -> dict[str, Any]:
    assert exc.body, f"no Status body with HTTP {exc.status}"
    parsed: dict[str, Any] = json.loads(exc.body)
    return parsed


def test_list_nodes_with_selectors(core: Any) -> None:
    nodes = core.list_node()
    assert len(nodes.items) == 4
    assert int(nodes.metadata.resource_version) > 0
    pool = nodes.items[0].metadata.labels["simcloud.io/nodepool"]
    in_pool = core.list_node(label_selector=f"simcloud.io/nodepool={pool}")
    assert in_pool.items
    assert all(n.metadata.labels["simcloud.io/nodepool"] == pool for n in in_pool.items)
    one = core.list_node(field_selector=f"metadata.name={nodes.items[1].metadata.name}")
    assert [n.metadata.name for n in one.items] == [nodes.items[1].metadata.name]
    with pytest.raises(ApiException) as bad:
        core.list_node(field_selector="spec.nodeName=x")
    assert bad.value.status == 400


def test_chunked_list_is_consistent(core: Any) -> None:
    everything = core.list_pod_for_all_namespaces()
    first = core.list_pod_for_all_namespaces(limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    names = [p.metadata.name for p in first.items]
    token = first.metadata._continue
    while token:
        page = core.list_pod_for_all_namespaces(limit=2, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert names == [p.metadata.name for p in everything.items]


def test_pods_by_node_and_phase(core: Any) -> None:
    node = core.list_node().items[0].metadata.name
    on_node = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
    assert on_node.items
    assert all(p.spec.node_name == node for p in on_node.items)
    running = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node},status.phase=Running"
    )
    assert all(p.status.phase == "Running" for p in running.items)


def test_patch_cordon_taint_and_condition(core: Any) -> None:
    name = core.list_node().items[2].metadata.name
    before = core.read_node(name)
    taint = {"key": "remediator.io/quarantine", "value": "xid-79", "effect": "NoSchedule"}
    patched = core.patch_node(
        name,
        {
            "spec": {"unschedulable": True, "taints": [taint]},
            "metadata": {"annotations": {"remediator.io/x": "1"}},
        },
    )
    assert patched.spec.unschedulable is True
    assert [t.key for t in patched.spec.taints] == ["remediator.io/quarantine"]
    assert patched.metadata.annotations["remediator.io/x"] == "1"
    assert int(patched.metadata.resource_version) > int(before.metadata.resource_version)
    condition = {
        "type": "GpuHealthy",
        "status": "False",
        "reason": "Xid79",
        "message": "GPU has fallen off the bus",
    }
    status = core.patch_node_status(name, {"status": {"conditions": [condition]}})
    types = {c.type: c.status for c in status.status.conditions}
    assert types["GpuHealthy"] == "False" and "Ready" in types
    # status is ignored on the main resource, as on a real server
    ignored = core.patch_node(
        name, {"status": {"conditions": [{"type": "GpuHealthy", "status": "True"}]}}
    )
    assert {c.type: c.status for c in ignored.status.conditions}["GpuHealthy"] == "False"
    core.patch_node(name, {"spec": {"unschedulable": None, "taints": None}})
    assert not core.read_node(name).spec.unschedulable


def test_patch_with_stale_resource_version_conflicts(core: Any) -> None:
    name = core.list_node().items[3].metadata.name
    stale = core.read_node(name).metadata.resource_version
    core.patch_node(name, {"metadata": {"labels": {"bump": "1"}}})
    with pytest.raises(ApiException) as conflict:
        core.patch_node(name, {"metadata": {"labels": {"bump": "2"}, "resourceVersion": stale}})
    assert conflict.value.status == 409
    assert body_of(conflict.value)["reason"] == "Conflict"


def test_watch_nodes_sees_changes(core: Any) -> None:
    nodes = core.list_node()
    name = nodes.items[0].metadata.name
    seen: list[tuple[str, str]] = []
    w = watch.Watch()

    def patch_later() -> None:
        time.sleep(0.5)
        core.patch_node(name, {"metadata": {"labels": {"watched": "yes"}}})

    threading.Thread(target=patch_later, daemon=True).start()
    for event in w.stream(
        core.list_node, resource_version=nodes.metadata.resource_version, timeout_seconds=20
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if event["object"].metadata.labels.get("watched") == "yes":
            w.stop()
    assert ("MODIFIED", name) in seen


def test_watch_single_object_by_field_selector(core: Any) -> None:
    name = core.list_node().items[1].metadata.name
    w = watch.Watch()
    events = list(
        w.stream(core.list_node, field_selector=f"metadata.name={name}", timeout_seconds=1)
    )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", name)]


def test_watch_with_invalid_resource_version_reports_error(cluster: SimHandle) -> None:
    with cluster.kube_http() as http:
        answer = http.get("/api/v1/nodes", params={"watch": "1", "resourceVersion": "-5"})
    assert answer.status_code == 200
    event = json.loads(answer.text.splitlines()[0])
    assert (event["type"], event["object"]["kind"], event["object"]["code"]) == (
        "ERROR",
        "Status",
        400,
    )


def test_eviction_blocked_by_pdb_is_429(core: Any, api: client.ApiClient) -> None:
    pods = core.list_namespaced_pod("training", field_selector="status.phase=Running")
    pod = pods.items[0]
    core.patch_namespaced_pod(
        pod.metadata.name, "training", {"metadata": {"labels": {"guarded": "yes"}}}
    )
    policy: Any = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget(
        "training",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"guarded": "yes"}}},
        },
    )

    def observed() -> bool:
        pdb = policy.read_namespaced_pod_disruption_budget("guard", "training")
        return bool(
            pdb.status
            and pdb.status.observed_generation == pdb.metadata.generation == 1
            and pdb.status.current_healthy == 1
        )

    wait_for(observed, what="the disruption controller to observe the budget")
    eviction = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace="training"),
        delete_options=client.V1DeleteOptions(grace_period_seconds=5),
    )
    with pytest.raises(ApiException) as blocked:
        core.create_namespaced_pod_eviction(pod.metadata.name, "training", eviction)
    assert blocked.value.status == 429
    status = body_of(blocked.value)
    assert status["kind"] == "Status" and status["reason"] == "TooManyRequests"
    causes = status["details"]["causes"]
    assert causes[0]["reason"] == "DisruptionBudget"
    assert "guard" in causes[0]["message"]
    assert (
        core.read_namespaced_pod(pod.metadata.name, "training").metadata.deletion_timestamp is None
    )
    policy.delete_namespaced_pod_disruption_budget("guard", "training")
    core.create_namespaced_pod_eviction(pod.metadata.name, "training", eviction)
    evicted = wait_for(
        lambda: _gone_or_terminating(core, pod.metadata.name, "training"),
        what="the evicted pod to terminate",
    )
    assert evicted


def _gone_or_terminating(core: Any, name: str, ns: str) -> bool:
    try:
        return core.read_namespaced_pod(name, ns).metadata.deletion_timestamp is not None
    except ApiException as exc:
        return exc.status == 404


def test_eviction_of_missing_pod_is_404(core: Any) -> None:
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="nope", namespace="default"))
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_pod_eviction("nope", "default", eviction)
    assert missing.value.status == 404
    assert body_of(missing.value)["reason"] == "NotFound"


def test_lease_optimistic_concurrency(api: client.ApiClient) -> None:
    leases: Any = client.CoordinationV1Api(api)
    lease = leases.create_namespaced_lease(
        "remediator",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "remediator-leader"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    lease.spec.holder_identity = "b"
    updated = leases.replace_namespaced_lease("remediator-leader", "remediator", lease)
    assert updated.spec.holder_identity == "b"
    lease.spec.holder_identity = "c"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as conflict:
        leases.replace_namespaced_lease("remediator-leader", "remediator", lease)
    assert conflict.value.status == 409
    assert body_of(conflict.value)["reason"] == "Conflict"
    with pytest.raises(ApiException) as exists:
        leases.create_namespaced_lease(
            "remediator", {"metadata": {"name": "remediator-leader"}, "spec": {}}
        )
    assert exists.value.status == 409 and body_of(exists.value)["reason"] == "AlreadyExists"
    leases.delete_namespaced_lease("remediator-leader", "remediator")
    with pytest.raises(ApiException) as gone:
        leases.read_namespaced_lease("remediator-leader", "remediator")
    assert gone.value.status == 404


def test_events_create_and_list(core: Any) -> None:
    node = core.list_node().items[0].metadata.name
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "remediation-"},
            "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
            "reason": "Cordoned",
            "message": "XID 79 on GPU 3",
            "type": "Warning",
            "source": {"component": "remediator"},
            "count": 1,
        },
    )
    found = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node},reason=Cordoned"
    )
    assert [e.message for e in found.items] == ["XID 79 on GPU 3"]


def test_errors_are_status_objects(cluster: SimHandle) -> None:
    with cluster.kube_http() as http:
        node = http.get("/api/v1/nodes").json()["items"][0]["metadata"]["name"]
        cases = [
            (http.get("/api/v1/nodes/nope"), 404, "NotFound"),
            (http.get("/api/v1/frobs"), 404, "NotFound"),
            (http.delete("/api/v1/nodes"), 405, "MethodNotAllowed"),
            (
                http.patch(
                    f"/api/v1/nodes/{node}",
                    content=b"{}",
                    headers={"Content-Type": "application/apply-patch+yaml"},
                ),
                415,
                "UnsupportedMediaType",
            ),
            (
                http.patch(
                    f"/api/v1/nodes/{node}",
                    content=b'[{"op":"test","path":"/spec/unschedulable","value":"x"}]',
                    headers={"Content-Type": "application/json-patch+json"},
                ),
                422,
                "Invalid",
            ),
            (
                http.post(
                    "/api/v1/namespaces/default/pods",
                    json={"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{}]}},
                ),
                422,
                "Invalid",
            ),
            (
                http.post(
                    "/api/v1/namespaces/missing/pods",
                    json={"metadata": {"name": "p"}, "spec": {"containers": [{}]}},
                ),
                404,
                "NotFound",
            ),
        ]
        protobuf = http.post(
            "/api/v1/namespaces",
            content=b"k8s\x00",
            headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
        )
        cases.append((protobuf, 415, "UnsupportedMediaType"))
        for response, code, reason in cases:
            body = response.json()
            assert (response.status_code, body["kind"], body["code"], body["reason"]) == (
                code,
                "Status",
                code,
                reason,
            ), response.text


def test_malformed_delete_options_are_400_and_touch_nothing(cluster: SimHandle) -> None:
    with cluster.kube_http() as http:
        pods = http.get(
            "/api/v1/pods", params={"labelSelector": "app.kubernetes.io/component=inference"}
        ).json()
        pod = pods["items"][0]["metadata"]
        path = f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}"
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": pod}
        bodies = [
            (f"{path}/eviction", {**eviction, "deleteOptions": {"gracePeriodSeconds": "soon"}}),
            (f"{path}/eviction", {**eviction, "deleteOptions": ["gracePeriodSeconds"]}),
        ]
        responses = [http.post(url, json=body) for url, body in bodies]
        for options in ({"gracePeriodSeconds": 1.5}, {"preconditions": ["uid"]}):
            responses.append(http.request("DELETE", path, json=options))
        for response in responses:
            body = response.json()
            assert (response.status_code, body["kind"], body["reason"]) == (
                400,
                "Status",
                "BadRequest",
            ), response.text
        after = http.get(path).json()["metadata"]
        assert "deletionTimestamp" not in after and after["uid"] == pod["uid"]


def test_table_for_kubectl(cluster: SimHandle) -> None:
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    with cluster.kube_http() as http:
        table = http.get("/api/v1/nodes", headers={"Accept": accept}).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
    ]
    assert len(table["rows"]) == 4
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_delete_pod_is_graceful(core: Any) -> None:
    pods = core.list_namespaced_pod("training", field_selector="status.phase=Running")
    pod = next(p for p in pods.items if p.metadata.labels.get("guarded") != "yes")
    deleted = core.delete_namespaced_pod(pod.metadata.name, "training", grace_period_seconds=30)
    assert deleted.metadata.deletion_timestamp is not None
    wait_for(
        lambda: _gone_or_terminating(core, pod.metadata.name, "training"),
        what="the pod to be terminating",
    )


def test_yaml_bodies_are_accepted(cluster: SimHandle) -> None:
    manifest = b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: from-yaml\n"
    with cluster.kube_http() as http:
        created = http.post(
            "/api/v1/namespaces", content=manifest, headers={"Content-Type": "application/yaml"}
        )
        assert created.status_code == 201, created.text
        assert http.get("/api/v1/namespaces/from-yaml").json()["metadata"]["name"] == "from-yaml"


def test_serve_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    handle = start_sim(tmp_path / "short-lived", nodes=1)
    with handle.kube_http() as http:
        assert http.get("/version").json()["major"] == "1"
    assert handle.stop() == 0
    assert not (handle.workdir / "ready.json").exists()
    with pytest.raises(httpx.TransportError), handle.kube_http(timeout=2) as http:
        http.get("/version")
