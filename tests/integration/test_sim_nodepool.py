"""The node-pool API of a real `remediator sim serve`, over loopback HTTP: the OpenAPI contract
(docs/nodepool-api.yaml) holds for every answer, idempotency, each injected fault, and the node
truly replaced in the cluster as stock kubectl sees it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.fixtures.sim import SimHandle, start_sim

pytestmark = pytest.mark.integration

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "nodepool-api.yaml"
schema = schemathesis.openapi.from_path(CONTRACT)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    """One simulator for the module; each test uses its own nodes and resets the faults."""
    handle = start_sim(tmp_path_factory.mktemp("sim-nodepool"), nodes=8, provision_delay=1.0)
    yield handle
    handle.stop()


@pytest.fixture
def api(cloud: SimHandle) -> Iterator[httpx.Client]:
    inject(cloud, {"type": "clear"})
    with httpx.Client(base_url=cloud.nodepool_url, timeout=10.0) as client:
        yield client


def inject(sim: SimHandle, rule: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{sim.inject_url}/v1/nodepool-faults", json=rule, timeout=5.0)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def conforms(response: httpx.Response) -> httpx.Response:
    """Validate one real answer against the contract's operation for its path and method."""
    request = response.request
    operation = schema.find_operation_by_path(request.method, request.url.path)
    assert operation is not None, f"not in the contract: {request.method} {request.url.path}"
    operation.validate_response(response)
    return response


def pool_with_nodes(api: httpx.Client, count: int) -> tuple[str, list[str]]:
    pools = conforms(api.get("/v1/pools")).json()["pools"]
    for pool in pools:
        nodes = conforms(api.get(f"/v1/pools/{pool['name']}")).json()["nodes"]
        if len(nodes) >= count:
            return pool["name"], nodes
    raise AssertionError(f"no pool with {count} nodes: {pools}")


def replace(api: httpx.Client, pool: str, node: str, key: str) -> httpx.Response:
    return api.post(
        f"/v1/pools/{pool}/replacements",
        json={"node": node, "reason": "integration test"},
        headers={"Idempotency-Key": key},
    )


def wait_operation(api: httpx.Client, op_id: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        op: dict[str, Any] = conforms(api.get(f"/v1/operations/{op_id}")).json()
        if op["state"] in ("succeeded", "failed"):
            return op
        time.sleep(0.1)
    raise AssertionError(f"operation {op_id} still {op['state']} after {timeout}s")


def kube_node(sim: SimHandle, name: str) -> dict[str, Any] | None:
    out = sim.kubectl("get", "node", name, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_answer_conforms_to_the_contract(case: schemathesis.Case, cloud: SimHandle) -> None:
    case.call_and_validate(base_url=cloud.nodepool_url)


def test_pools_nodes_and_capacity(api: httpx.Client, cloud: SimHandle) -> None:
    pool, nodes = pool_with_nodes(api, 2)
    listed = conforms(api.get(f"/v1/pools/{pool}/nodes")).json()["nodes"]
    assert [n["name"] for n in listed] == nodes
    assert {n["pool"] for n in listed} == {pool}
    capacity = conforms(api.get(f"/v1/pools/{pool}/capacity")).json()
    assert capacity["pool"] == pool and capacity["spare_capacity"] >= 1
    kube_pools = {
        n["metadata"]["labels"]["simcloud.io/nodepool"]
        for n in json.loads(cloud.kubectl("get", "nodes", "-o", "json"))["items"]
    }
    assert pool in kube_pools


def test_replacement_swaps_the_node_and_the_key_replays(
    api: httpx.Client, cloud: SimHandle
) -> None:
    pool, nodes = pool_with_nodes(api, 2)
    old = nodes[0]
    spare = api.get(f"/v1/pools/{pool}/capacity").json()["spare_capacity"]
    template = api.get(f"/v1/pools/{pool}").json()["labels"]

    created = conforms(replace(api, pool, old, f"it-{old}"))
    assert created.status_code == 202
    op = created.json()
    assert created.headers["Location"] == f"/v1/operations/{op['id']}"
    assert op["state"] in ("pending", "provisioning") and op["node"] == old

    again = conforms(replace(api, pool, old, f"it-{old}"))
    assert again.status_code == 200 and again.json()["id"] == op["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    clash = conforms(replace(api, pool, nodes[1], f"it-{old}"))
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "idempotency_key_reused"

    done = wait_operation(api, op["id"])
    assert done["state"] == "succeeded", done
    new = done["new_node"]
    assert new.startswith(f"{pool}-") and new != old
    assert kube_node(cloud, old) is None
    node = kube_node(cloud, new)
    assert node is not None
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    labels = node["metadata"]["labels"]
    assert labels["simcloud.io/nodepool"] == pool
    assert all(labels.get(k) == v for k, v in template.items())
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert api.get(f"/v1/pools/{pool}/capacity").json()["spare_capacity"] == spare - 1

    replay = conforms(replace(api, pool, old, f"it-{old}"))  # long after the node is gone
    assert replay.status_code == 200 and replay.json()["state"] == "succeeded"
    # The simulator's own listing (not the contract's): each operation with the key that made it.
    listed = {o["id"]: o for o in api.get("/v1/operations").json()["operations"]}
    assert listed[op["id"]]["idempotency_key"] == f"it-{old}"
    assert listed[op["id"]]["state"] == "succeeded" and listed[op["id"]]["started_at"]


def test_refusals_carry_the_error_body(api: httpx.Client) -> None:
    pool, nodes = pool_with_nodes(api, 1)
    cases = [
        (
            api.post(f"/v1/pools/{pool}/replacements", json={"node": nodes[0], "reason": "r"}),
            400,
            "missing_idempotency_key",
        ),
        (
            api.post(
                f"/v1/pools/{pool}/replacements",
                content=b"{nope",
                headers={"Idempotency-Key": "bad-json"},
            ),
            400,
            "invalid_json",
        ),
        (
            api.post(
                f"/v1/pools/{pool}/replacements",
                json={"reason": "r"},
                headers={"Idempotency-Key": "no-node"},
            ),
            400,
            "invalid_request",
        ),
        (replace(api, "no-such-pool", nodes[0], "k-pool"), 404, "pool_not_found"),
        (replace(api, pool, "no-such-node", "k-node"), 404, "node_not_found"),
        (api.get("/v1/operations/op-missing"), 404, "operation_not_found"),
        (api.get("/v1/pools/no-such-pool/capacity"), 404, "pool_not_found"),
    ]
    for response, status, code in cases:
        conforms(response)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code)
        assert response.json()["error"]["message"]
    unknown = api.get("/v1/nothing-here")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    wrong = api.delete(f"/v1/pools/{pool}")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert "GET" in wrong.headers["Allow"]


def test_injected_server_errors_and_throttling(api: httpx.Client, cloud: SimHandle) -> None:
    inject(cloud, {"type": "error", "status": 503, "count": 2})
    for _ in range(2):
        response = conforms(api.get("/v1/pools"))
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "unavailable"
        assert response.headers["Retry-After"] == "1"
    assert api.get("/v1/pools").status_code == 200

    inject(cloud, {"type": "error", "status": 500, "count": 1})
    failed = conforms(api.get("/v1/pools"))
    assert failed.status_code == 500 and failed.json()["error"]["code"] == "internal_error"

    inject(cloud, {"type": "throttle", "count": 1, "retry_after": 3})
    throttled = conforms(api.get("/v1/pools"))
    assert throttled.status_code == 429
    assert throttled.headers["Retry-After"] == "3"
    assert throttled.json()["error"]["code"] == "rate_limited"
    assert api.get("/v1/pools").status_code == 200


def test_a_lost_answer_is_recovered_by_retrying_with_the_key(
    api: httpx.Client, cloud: SimHandle
) -> None:
    pool, nodes = pool_with_nodes(api, 3)
    node = nodes[2]
    inject(cloud, {"type": "error", "status": 500, "count": 1, "after_processing": True})
    lost = replace(api, pool, node, f"lost-{node}")
    assert lost.status_code == 500
    retried = conforms(replace(api, pool, node, f"lost-{node}"))
    assert retried.status_code == 200  # the first request did take effect
    assert wait_operation(api, retried.json()["id"])["state"] == "succeeded"


def test_a_slow_answer_still_takes_effect(api: httpx.Client, cloud: SimHandle) -> None:
    pool, nodes = pool_with_nodes(api, 4)
    node = nodes[3]
    inject(cloud, {"type": "delay", "count": 1, "seconds": 1.5})
    with pytest.raises(httpx.ReadTimeout):
        api.post(
            f"/v1/pools/{pool}/replacements",
            json={"node": node, "reason": "r"},
            headers={"Idempotency-Key": f"slow-{node}"},
            timeout=0.3,
        )
    retried = conforms(replace(api, pool, node, f"slow-{node}"))
    assert retried.status_code == 200
    inject(cloud, {"type": "delay", "count": 1, "seconds": 0.5})
    started = time.monotonic()
    assert api.get("/v1/pools").status_code == 200
    assert time.monotonic() - started >= 0.5


def test_capacity_exhausted_names_the_pool(api: httpx.Client, cloud: SimHandle) -> None:
    pool, nodes = pool_with_nodes(api, 1)
    inject(cloud, {"type": "spare_capacity", "pool": pool, "spare": 0})
    assert api.get(f"/v1/pools/{pool}/capacity").json()["spare_capacity"] == 0
    refused = conforms(replace(api, pool, nodes[0], f"full-{nodes[0]}"))
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "capacity_exhausted" and f'"{pool}"' in error["message"]
    bad = httpx.post(
        f"{cloud.inject_url}/v1/nodepool-faults",
        json={"type": "spare_capacity", "pool": "no-such-pool", "spare": 1},
    )
    assert bad.status_code == 404 and bad.json()["error"]["code"] == "pool_not_found"
    inject(cloud, {"type": "spare_capacity", "pool": pool, "spare": 3})


def test_an_injected_failure_fails_the_operation_and_keeps_the_node(
    api: httpx.Client, cloud: SimHandle
) -> None:
    pool, nodes = pool_with_nodes(api, 1)
    node = nodes[-1]
    spare = api.get(f"/v1/pools/{pool}/capacity").json()["spare_capacity"]
    inject(
        cloud,
        {"type": "fail_next", "code": "provisioning_failed", "message": "no capacity in the zone"},
    )
    op = replace(api, pool, node, f"doomed-{node}").json()
    done = wait_operation(api, op["id"])
    assert done["state"] == "failed" and done["new_node"] is None
    assert done["error"] == {"code": "provisioning_failed", "message": "no capacity in the zone"}
    assert kube_node(cloud, node) is not None
    assert api.get(f"/v1/pools/{pool}/capacity").json()["spare_capacity"] == spare
