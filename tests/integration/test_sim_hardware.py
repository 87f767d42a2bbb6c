"""The validation programs and hardware faults end to end through `sim serve`: Jobs applied with
stock kubectl run all_reduce_perf, nvidia-smi and ibstat on a simulated node and log their real
output; faults injected over HTTP change it; and a pool's next new machine arrives broken on every
cloud the simulator serves (node-pool HTTP, AWS through moto, Cluster API, GCE), replaced through
remediator's own provider for that cloud."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from remediator.kube.client import KubeClient
from remediator.providers.base import NodePoolProvider, Operation, OperationState
from remediator.providers.select import build_provider
from remediator.settings import AnyProviderSettings
from remediator.sim.launch import SimHandle, start_sim
from tests.integration.test_sim_repair import node_of, run_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

POOL = "h100-train"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    handle = start_sim(tmp_path_factory.mktemp("sim-hardware"), nodes=4, reboot_delay=1.0)
    yield handle
    handle.stop()


def inject(sim: SimHandle, body: dict[str, Any], path: str = "/v1/faults") -> dict[str, Any]:
    answer = httpx.post(f"{sim.inject_url}{path}", json=body, timeout=10)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def job_log(sim: SimHandle, tmp: Path, name: str, node: str, command: str) -> tuple[int, str]:
    """Run `command` (through `sh -c`, as a validation Job would) on `node`: exit code and log."""
    run_job(sim, tmp, name, node, ["sh", "-c", command])
    pods = json.loads(
        sim.kubectl("get", "pods", "-n", "remediator", "-l", f"job-name={name}", "-o", "json")
    )
    pod = pods["items"][0]
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    log = sim.kubectl("logs", pod["metadata"]["name"], "-n", "remediator")
    return int(terminated["exitCode"]), log


def avg_busbw(log: str) -> float:
    line = next(x for x in log.splitlines() if x.startswith("# Avg bus bandwidth"))
    return float(line.split(":", 1)[1])


def test_all_reduce_perf_in_a_job_reports_the_bandwidth_a_slow_nvlink_halves(
    sim: SimHandle, tmp_path: Path
) -> None:
    node = node_of(sim, 0)
    command = "all_reduce_perf -b 8 -e 8G -f 2 -g 8"
    code, healthy = job_log(sim, tmp_path, "nccl-1", node, command)
    assert code == 0, healthy
    assert "# Out of bounds values : 0 OK" in healthy
    rows = [x for x in healthy.splitlines() if x and not x.startswith("#")]
    assert len(rows) == 31 and rows[-1].split()[0] == str(8 * 1024**3)
    inject(sim, {"type": "nvlink_slow", "node": node, "fraction": 0.5})
    code, slow = job_log(sim, tmp_path, "nccl-2", node, command)
    assert code == 0
    assert avg_busbw(slow) == pytest.approx(avg_busbw(healthy) * 0.5, rel=0.1)
    inject(sim, {"type": "clear", "node": node})


def test_nvidia_smi_and_ibstat_in_jobs_report_the_inventory_and_its_faults(
    sim: SimHandle, tmp_path: Path
) -> None:
    node = node_of(sim, 1)
    query = "nvidia-smi --query-gpu=index,name,uuid,serial,driver_version,memory.total --format=csv"
    code, out = job_log(sim, tmp_path, "smi-1", node, query)
    assert code == 0, out
    rows = list(csv.DictReader(io.StringIO(out), skipinitialspace=True))
    assert len(rows) == 8 and rows[0]["memory.total [MiB]"] == "81559 MiB"
    metrics = httpx.get(f"{sim.metrics_url}/metrics", params={"node": node}, timeout=10).text
    assert all(f'UUID="{r["uuid"]}"' in metrics for r in rows)  # the exporter agrees

    inject(sim, {"type": "gpu_missing", "node": node, "gpu": 4, "persistent": True})
    inject(sim, {"type": "ib_link_down", "node": node, "device": "mlx5_1"})
    inject(sim, {"type": "versions", "node": node, "driver_version": "535.183.01"})
    code, out = job_log(sim, tmp_path, "smi-2", node, query)
    rows = list(csv.DictReader(io.StringIO(out), skipinitialspace=True))
    assert len(rows) == 7 and {r["driver_version"] for r in rows} == {"535.183.01"}
    code, table = job_log(sim, tmp_path, "smi-3", node, "nvidia-smi")
    assert code == 0 and "CUDA Version: 12.2" in table
    code, ib = job_log(sim, tmp_path, "ibstat-1", node, "ibstat")
    assert code == 0
    blocks = ib.split("CA '")[1:]
    assert len(blocks) == 8
    assert "State: Down" in blocks[1] and all(
        "State: Active" in b for i, b in enumerate(blocks) if i != 1
    )
    listed = {f["type"] for f in inject_list(sim) if f["node"] == node}
    assert {"gpu_missing", "ib_link_down", "versions"} <= listed
    inject(sim, {"type": "clear", "node": node})


def inject_list(sim: SimHandle) -> list[dict[str, Any]]:
    faults: list[dict[str, Any]] = httpx.get(f"{sim.inject_url}/v1/faults", timeout=10).json()[
        "faults"
    ]
    return faults


def settled(provider: NodePoolProvider, op_id: str, timeout: float = 90.0) -> Operation:
    deadline = time.monotonic() + timeout
    while True:
        op = provider.get_operation(op_id)
        if op.finished:
            return op
        assert time.monotonic() < deadline, op
        time.sleep(0.2)


@pytest.mark.parametrize("cloud", ["http", "aws", "clusterapi", "gce"])
def test_the_pools_next_new_machine_arrives_dead_on_every_cloud(
    sim_factory: Callable[..., SimHandle], cloud: str
) -> None:
    sim = sim_factory(nodes=3, provision_delay=0.3, cloud=cloud)
    fault = {"type": "xid", "gpu": 2, "code": 79}
    queued = inject(sim, {"type": "doa_next", "pool": POOL, "fault": fault}, "/v1/nodepool-faults")
    assert queued["faults"]["doa_next"] == {POOL: [{**fault, "persistent": True}]}
    settings = TypeAdapter(AnyProviderSettings).validate_python(sim.provider)
    with KubeClient.from_kubeconfig(sim.kubeconfig) as kube:
        provider = build_provider(settings, kube)
        old = "h100-train-0000"
        first = settled(provider, provider.request_replacement(POOL, old, "k-1", "xid 79").id)
        assert first.state is OperationState.SUCCEEDED, first
        bad = first.new_node
        assert bad is not None
        found = [f for f in inject_list(sim) if f["node"] == bad]
        assert {"node": bad, "gpu": 2, "type": "xid", "code": 79} in found
        # The device plugin no longer offers the GPU that fell off the bus.
        got = json.loads(sim.kubectl("get", "node", bad, "-o", "json"))
        assert got["status"]["allocatable"]["nvidia.com/gpu"] == "7"

        second = settled(provider, provider.request_replacement(POOL, bad, "k-2", "doa").id)
        assert second.state is OperationState.SUCCEEDED, second
        assert second.new_node is not None
        assert [f for f in inject_list(sim) if f["node"] == second.new_node] == []
    listed = httpx.get(f"{sim.inject_url}/v1/nodepool-faults", timeout=10).json()["faults"]
    assert listed["doa_next"] == {}
    assert [a["node"] for a in listed["dead_on_arrival"]] == [bad]
