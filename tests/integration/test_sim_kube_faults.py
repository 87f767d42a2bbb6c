"""Kubernetes API faults of the real `remediator sim serve`, seen by the official Python client
and by stock kubectl: the apiserver's Status bodies and headers, verb and resource matching as
the apiserver derives them, counts and clearing, dropped connections, watches ended with 410."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from remediator.sim.kube.api.faults import request_info
from tests.fixtures.sim import KUBECTL, KubectlError, SimHandle, start_sim

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    handle = start_sim(tmp_path_factory.mktemp("sim-kube-faults"), nodes=2)
    yield handle
    handle.stop()


@pytest.fixture
def inject(cluster: SimHandle) -> Iterator[httpx.Client]:
    http = httpx.Client(base_url=cluster.inject_url, timeout=10.0)
    yield http
    assert http.post("/v1/kube-faults", json={"type": "clear"}).status_code == 200
    http.close()


@pytest.fixture(scope="module")
def core(cluster: SimHandle) -> Any:
    # No urllib3 retries: by default it would itself retry a 503/429 carrying Retry-After.
    cfg = client.Configuration()
    cfg.retries = 0
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    return client.CoreV1Api(client.ApiClient(cfg))


def fault(inject: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = inject.post("/v1/kube-faults", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_verbs_and_resources_as_the_apiserver_derives_them() -> None:
    assert request_info("GET", "/api/v1/nodes", "").verb == "list"
    assert request_info("GET", "/api/v1/nodes", "watch=1&resourceVersion=5").verb == "watch"
    assert request_info("GET", "/api/v1/nodes/n1", "").verb == "get"
    eviction = request_info("POST", "/api/v1/namespaces/ns/pods/p/eviction", "")
    assert (eviction.verb, eviction.resource, eviction.namespace) == (
        "create",
        "pods/eviction",
        "ns",
    )
    lease = request_info("PUT", "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", "")
    assert (lease.verb, lease.resource, lease.name) == ("update", "leases", "l")
    assert request_info("DELETE", "/api/v1/namespaces/ns/pods", "").verb == "deletecollection"
    assert request_info("GET", "/version", "").resource is None


def test_503_for_a_count_on_one_verb_only(core: Any, inject: httpx.Client) -> None:
    node = core.list_node().items[0].metadata.name
    fault(inject, {"type": "error", "status": 503, "verbs": ["list"], "count": 2, "retry_after": 3})
    core.read_node(node)  # a get is not a list
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            core.list_node()
        assert caught.value.status == 503
        assert caught.value.headers["Retry-After"] == "3"
        body = json.loads(caught.value.body)
        assert body["reason"] == "ServiceUnavailable"
        assert body["details"]["retryAfterSeconds"] == 3
        assert body["kind"] == "Status" and body["code"] == 503
    assert core.list_node().items  # the count is spent
    assert inject.get("/v1/kube-faults").json()["faults"] == []


def test_429_on_evictions_leaves_the_pod_alone(
    cluster: SimHandle, core: Any, inject: httpx.Client
) -> None:
    node = core.list_node().items[0].metadata.name
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="victim"),
        spec=client.V1PodSpec(
            node_name=node, containers=[client.V1Container(name="c", image="busybox")]
        ),
    )
    core.create_namespaced_pod("default", pod)
    fault(
        inject, {"type": "error", "status": 429, "resources": ["pods/eviction"], "retry_after": 5}
    )
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="victim", namespace="default"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_eviction("victim", "default", body)
    assert caught.value.status == 429
    status = json.loads(caught.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Too many requests, please try again later."
    assert caught.value.headers["Retry-After"] == "5"
    pod = core.read_namespaced_pod("victim", "default")
    assert pod.metadata.deletion_timestamp is None  # the faulted request never reached the server
    seen = inject.get("/v1/kube-requests").json()["requests"]
    refused = [r for r in seen if r["resource"] == "pods/eviction"]
    assert refused[-1] | {"at": 0, "seq": 0} == refused[-1] | {
        "at": 0,
        "seq": 0,
        "verb": "create",
        "name": "victim",
        "status": 429,
        "injected": "error",
    }
    fault(inject, {"type": "clear"})
    cluster.kubectl("delete", "pod", "victim", "--grace-period=0", "--force", "--wait=false")


def test_500_on_writes_for_kubectl_and_a_duration(cluster: SimHandle, inject: httpx.Client) -> None:
    node = cluster.kubectl("get", "nodes", "-o", "name").split()[0]
    fault(
        inject,
        {
            "type": "error",
            "status": 500,
            "verbs": ["create", "patch", "delete"],
            "duration_seconds": 60,
        },
    )
    # kubectl cordon reports a failed patch on stderr (and still exits 0).
    out = cluster.kubectl("cordon", node, check=False)
    assert "Internal error occurred: etcdserver: request timed out" in out
    with pytest.raises(KubectlError, match="Internal error occurred"):
        cluster.kubectl("annotate", node, "x=y")
    assert cluster.kubectl("get", node, "-o", "jsonpath={.spec.unschedulable}") == ""
    active = inject.get("/v1/kube-faults").json()["faults"]
    assert active and 0 < active[0]["seconds_left"] <= 60
    fault(inject, {"type": "clear"})
    cluster.kubectl("cordon", node)
    cluster.kubectl("uncordon", node)


def test_delay_and_connection_reset(cluster: SimHandle, core: Any, inject: httpx.Client) -> None:
    fault(inject, {"type": "reset", "verbs": ["get"], "resources": ["nodes"], "count": 1})
    name = core.list_node().items[0].metadata.name
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.read_node(name)
    assert core.read_node(name).metadata.name == name
    fault(inject, {"type": "delay", "seconds": 1.5, "verbs": ["get"], "count": 1})
    with pytest.raises(urllib3.exceptions.MaxRetryError, match="Read timed out"):
        core.read_node(name, _request_timeout=(2, 0.5))


def test_watch_gone_ends_open_watches_and_refuses_resumes(
    cluster: SimHandle, core: Any, inject: httpx.Client
) -> None:
    listed = core.list_node()
    rv = listed.metadata.resource_version
    errors: list[Exception] = []
    events: list[str] = []

    def follow() -> None:
        try:
            for event in watch.Watch().stream(
                core.list_node, resource_version=rv, timeout_seconds=60
            ):
                events.append(event["type"])
        except ApiException as exc:
            errors.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    # The watch must be open before the fault: wait until the simulator has seen it.
    deadline = 200
    while not any(r["verb"] == "watch" for r in inject.get("/v1/kube-requests").json()["requests"]):
        deadline -= 1
        assert deadline, "the watch never reached the simulator"
        threading.Event().wait(0.05)
    answer = fault(inject, {"type": "watch_gone", "resources": ["nodes"], "count": 1})
    assert "1 open watch(es) ended" in answer["message"]
    follower.join(timeout=30)
    assert not follower.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ApiException)
    assert errors[0].status == 410  # the client raises the ERROR event as 410 Expired

    # Resuming from a resourceVersion is refused once more (count 1), as the watch cache does.
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=5):
            pass
    assert caught.value.status == 410
    # kubectl's own watch from "now" (no resourceVersion) is not refused.
    out = subprocess.run(
        [
            KUBECTL,
            "--kubeconfig",
            str(cluster.kubeconfig),
            "get",
            "nodes",
            "-w",
            "--request-timeout=2s",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.items[0].metadata.name in out.stdout


def test_inject_cli_sets_and_clears_kube_faults(cluster: SimHandle, inject: httpx.Client) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "remediator",
                "sim",
                "inject",
                "--url",
                cluster.inject_url,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )

    done = cli("--kube-fault", json.dumps({"type": "error", "status": 503, "verbs": ["patch"]}))
    assert done.returncode == 0, done.stderr
    assert "patch any resource answer 503 until cleared" in done.stdout
    assert len(inject.get("/v1/kube-faults").json()["faults"]) == 1
    bad = cli("--kube-fault", json.dumps({"type": "error", "status": 404}))
    assert bad.returncode == 1 and "status" in bad.stderr
    assert cli("--kube-fault", '{"type": "clear"}').returncode == 0
    assert inject.get("/v1/kube-faults").json()["faults"] == []
