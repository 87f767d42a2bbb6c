"""The simulator's side of repair before replace, through stock kubectl and the HTTP APIs:
host-program Jobs run to completion with an exit code and a log, a GPU reset and a reboot clear
transient faults and keep persistent ones, `dcgmi diag -j` reports the GPUs still faulty, and a
reboot through the node-pool API takes the node NotReady and brings it back with a new boot id,
once per idempotency key."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.providers.base import RebootUnsupported
from remediator.providers.http import HttpNodePoolProvider
from remediator.sim.launch import SimHandle, start_sim
from tests.integration.test_sim_nodepool import conforms

pytestmark = pytest.mark.integration

POOL = "h100-train"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    handle = start_sim(tmp_path_factory.mktemp("sim-repair"), nodes=8, reboot_delay=1.0)
    yield handle
    handle.stop()


def wait(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def node_of(sim: SimHandle, index: int) -> str:
    names = sim.kubectl("get", "nodes", "-l", f"simcloud.io/nodepool={POOL}", "-o", "name")
    return names.split()[index].removeprefix("node/")


def run_job(sim: SimHandle, tmp: Path, name: str, node: str, command: list[str]) -> dict[str, Any]:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "remediator"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "tool", "image": "nvcr.io/nvidia/dcgm", "command": command}
                    ],
                }
            },
        },
    }
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(job))
    sim.kubectl("apply", "-f", str(path))

    def finished() -> bool:
        got = json.loads(sim.kubectl("get", "job", name, "-n", "remediator", "-o", "json"))
        return bool((got.get("status") or {}).get("conditions"))

    wait(finished, f"job {name}")
    found: dict[str, Any] = json.loads(
        sim.kubectl("get", "job", name, "-n", "remediator", "-o", "json")
    )
    return found


def faults(sim: SimHandle, node: str) -> list[dict[str, Any]]:
    listed = httpx.get(f"{sim.inject_url}/v1/faults", timeout=5).json()["faults"]
    return [f for f in listed if f["node"] == node]


def inject(sim: SimHandle, body: dict[str, Any]) -> None:
    assert httpx.post(f"{sim.inject_url}/v1/faults", json=body, timeout=5).status_code == 200


def test_a_reset_job_clears_a_transient_xid_on_its_gpu_only(sim: SimHandle, tmp_path: Path) -> None:
    node = node_of(sim, 0)
    inject(sim, {"type": "xid", "node": node, "gpu": 3, "code": 95})
    inject(sim, {"type": "xid", "node": node, "gpu": 5, "code": 95})
    job = run_job(sim, tmp_path, "reset-3", node, ["nvidia-smi", "--gpu-reset", "-i", "3"])
    # The API server's defaulting: the Job selects its own pods (the namespace holds others,
    # the agents' DaemonSet pods), so `kubectl logs job/…` reads this one.
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["status"]["conditions"][0]["type"] == "Complete"
    assert job["status"]["succeeded"] == 1
    assert "was successfully reset" in sim.kubectl("logs", "job/reset-3", "-n", "remediator")
    assert [f["gpu"] for f in faults(sim, node)] == [5]


def test_diag_reports_the_gpu_that_keeps_a_persistent_fault(sim: SimHandle, tmp_path: Path) -> None:
    node = node_of(sim, 1)
    inject(sim, {"type": "xid", "node": node, "gpu": 1, "code": 79, "persistent": True})
    inject(sim, {"type": "xid", "node": node, "gpu": 2, "code": 48})
    reset = run_job(sim, tmp_path, "reset-1", node, ["nvidia-smi", "--gpu-reset", "-i", "1"])
    assert reset["status"]["succeeded"] == 1
    job = run_job(sim, tmp_path, "diag-1", node, ["dcgmi", "diag", "-r", "2", "-j"])
    assert job["status"]["conditions"][0]["type"] == "Failed"
    pods = json.loads(
        sim.kubectl("get", "pods", "-n", "remediator", "-l", "job-name=diag-1", "-o", "json")
    )
    terminated = pods["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] != 0
    report = json.loads(
        sim.kubectl("logs", pods["items"][0]["metadata"]["name"], "-n", "remediator")
    )
    categories = report["DCGM GPU Diagnostic"]["test_categories"]
    assert [c["category"] for c in categories] == ["Deployment", "Integration", "Hardware"]
    failing = {
        r["gpu_ids"]
        for c in categories
        for t in c["tests"]
        for r in t["results"]
        if r["status"] == "Fail"
    }
    assert failing == {"1", "2"}


def boot_id(sim: SimHandle, node: str) -> str:
    got = json.loads(sim.kubectl("get", "node", node, "-o", "json"))
    return str(got["status"]["nodeInfo"]["bootID"])


def ready(sim: SimHandle, node: str) -> str:
    got = json.loads(sim.kubectl("get", "node", node, "-o", "json"))
    return next(c["status"] for c in got["status"]["conditions"] if c["type"] == "Ready")


def test_a_reboot_through_the_node_pool_api_happens_once_per_key(sim: SimHandle) -> None:
    node = node_of(sim, 2)
    inject(sim, {"type": "xid", "node": node, "gpu": 0, "code": 79})
    inject(sim, {"type": "xid", "node": node, "gpu": 4, "code": 79, "persistent": True})
    before = boot_id(sim, node)
    body = {"node": node, "reason": "XID 79"}
    headers = {"Idempotency-Key": "reboot-test-1"}
    url = f"{sim.nodepool_url}/v1/pools/{POOL}/reboots"
    first = conforms(httpx.post(url, json=body, headers=headers, timeout=5))
    assert first.status_code == 202, first.text
    # Down at once (Unknown), or on a loaded machine already back with a new boot id.
    assert ready(sim, node) == "Unknown" or boot_id(sim, node) != before
    again = conforms(httpx.post(url, json=body, headers=headers, timeout=5))
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    wait(lambda: ready(sim, node) == "True", "the node back Ready")
    assert boot_id(sim, node) != before
    assert [(f["gpu"], f["code"]) for f in faults(sim, node)] == [(4, 79)]
    other = httpx.post(url, json={**body, "node": node_of(sim, 3)}, headers=headers, timeout=5)
    assert other.status_code == 409


def test_a_reboot_job_reboots_the_host(sim: SimHandle, tmp_path: Path) -> None:
    node = node_of(sim, 3)
    before = boot_id(sim, node)
    command = ["sh", "-c", "chroot /host systemctl reboot"]
    run_job(sim, tmp_path, "reboot-3", node, command)
    wait(lambda: boot_id(sim, node) != before and ready(sim, node) == "True", "the reboot")


def test_the_http_provider_reboots_once_per_key_and_knows_an_api_without_reboots(
    sim: SimHandle,
) -> None:
    node = node_of(sim, 0)
    provider = HttpNodePoolProvider(sim.nodepool_url, max_retries=0)
    first = provider.reboot(POOL, node, "provider-key-1", "test")
    assert provider.reboot(POOL, node, "provider-key-1", "test") == first
    wait(lambda: ready(sim, node) == "True", "the node back Ready")
    older = HttpNodePoolProvider(sim.nodepool_url + "/v0", max_retries=0)
    with pytest.raises(RebootUnsupported):
        older.reboot(POOL, node, "provider-key-2", "test")
