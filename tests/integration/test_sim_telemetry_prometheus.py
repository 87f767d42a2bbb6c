"""A real Prometheus scrapes the simulator's telemetry; faults injected with the real CLI
(`remediator sim inject`) show up in PromQL on the right node and GPU, and on the Node object."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from typing import Any

import httpx
import pytest

from tests.fixtures.prometheus import PrometheusFactory
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration


def cli_inject(sim: SimHandle, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remediator", "sim", "inject", "--url", sim.inject_url, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def node_json(sim: SimHandle, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(sim.kubectl("get", "node", name, "-o", "json"))
    return result


def test_prometheus_sees_an_injected_xid_79_on_the_right_gpu(
    sim: SimHandle, prometheus_factory: PrometheusFactory
) -> None:
    prometheus = prometheus_factory([f"{sim.metrics_url}/metrics"], scrape_interval="1s")
    nodes = json.loads(sim.kubectl("get", "nodes", "-o", "json"))["items"]
    gpu_nodes = [n for n in nodes if int(n["status"]["capacity"].get("nvidia.com/gpu", "0")) > 3]
    target = gpu_nodes[0]["metadata"]["name"]
    expected = sum(int(n["status"]["capacity"].get("nvidia.com/gpu", "0")) for n in nodes)
    prometheus.wait_for(
        "count(DCGM_FI_DEV_GPU_TEMP)",
        lambda r: bool(r) and int(float(r[0]["value"][1])) == expected,
    )
    assert prometheus.query("DCGM_FI_DEV_XID_ERRORS != 0") == []

    done = cli_inject(sim, "--node", target, "--gpu", "3", "--xid", "79")
    assert done.returncode == 0, done.stderr
    assert "XID 79" in done.stdout and "GPU has fallen off the bus" in done.stdout

    hits = prometheus.wait_for("DCGM_FI_DEV_XID_ERRORS == 79")
    assert len(hits) == 1
    labels = hits[0]["metric"]
    assert (labels["Hostname"], labels["gpu"], labels["err_code"]) == (target, "3", "79")
    assert labels["device"] == "nvidia3" and labels["UUID"].startswith("GPU-")
    assert float(hits[0]["value"][1]) == 79
    # Off the bus: its other series go stale while the other GPUs keep reporting.
    prometheus.wait_for(
        f'count(DCGM_FI_DEV_GPU_TEMP{{Hostname="{target}"}})',
        lambda r: bool(r) and r[0]["value"][1] == "7",
    )
    allocatable = node_json(sim, target)["status"]["allocatable"]["nvidia.com/gpu"]
    assert int(allocatable) == int(gpu_nodes[0]["status"]["capacity"]["nvidia.com/gpu"]) - 1


def test_cli_faults_reach_prometheus_and_the_node(
    sim: SimHandle, prometheus_factory: PrometheusFactory
) -> None:
    prometheus = prometheus_factory([f"{sim.metrics_url}/metrics"], scrape_interval="1s")
    target = json.loads(sim.kubectl("get", "nodes", "-o", "json"))["items"][-1]["metadata"]["name"]

    down = cli_inject(sim, "--node", target, "--ib-link-down", "--ib-device", "mlx5_2")
    assert down.returncode == 0, down.stderr
    hits = prometheus.wait_for(f'node_infiniband_state_id{{node="{target}"}} == 1')
    assert [h["metric"]["device"] for h in hits] == ["mlx5_2"]
    downed = prometheus.query(
        f'node_infiniband_link_downed_total{{node="{target}",device="mlx5_2"}}'
    )
    assert float(downed[0]["value"][1]) == 1

    burst = cli_inject(sim, "--node", target, "--gpu", "1", "--nvlink-errors", "40")
    assert burst.returncode == 0, burst.stderr
    prometheus.wait_for(
        f'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{{Hostname="{target}",gpu="1"}} == 40'
    )

    cond = cli_inject(sim, "--node", target, "--condition", "GpuXidError=True")
    assert cond.returncode == 0, cond.stderr
    conditions = {c["type"]: c for c in node_json(sim, target)["status"]["conditions"]}
    assert conditions["GpuXidError"]["status"] == "True"

    active = httpx.get(f"{sim.inject_url}/v1/faults", timeout=5).json()["faults"]
    assert {"node": target, "type": "ib_link_down", "device": "mlx5_2"} in active
    assert {
        "node": target,
        "type": "condition",
        "condition": "GpuXidError",
        "status": "True",
    } in active

    cleared = cli_inject(sim, "--node", target, "--clear")
    assert cleared.returncode == 0, cleared.stderr
    prometheus.wait_for(f'node_infiniband_state_id{{node="{target}",device="mlx5_2"}} == 4')
    conditions = {c["type"]: c for c in node_json(sim, target)["status"]["conditions"]}
    assert conditions["GpuXidError"]["status"] == "False"
    assert httpx.get(f"{sim.inject_url}/v1/faults", timeout=5).json()["faults"] == []


def test_cli_reports_bad_input_with_the_servers_reason(sim: SimHandle) -> None:
    unknown = cli_inject(sim, "--node", "no-such-node", "--gpu", "0", "--xid", "79")
    assert unknown.returncode == 1
    assert 'node "no-such-node" does not exist' in unknown.stderr
    target = json.loads(sim.kubectl("get", "nodes", "-o", "json"))["items"][0]["metadata"]["name"]
    no_gpu = cli_inject(sim, "--node", target, "--xid", "79")
    assert no_gpu.returncode == 1 and "gpu" in no_gpu.stderr
    bad = cli_inject(sim, "--node", target, "--condition", "Ready")
    assert bad.returncode == 1 and "TYPE=STATUS" in bad.stderr
    out_of_range = cli_inject(sim, "--node", target, "--gpu", "99", "--gpu-missing")
    assert out_of_range.returncode == 1 and "there is no GPU 99" in out_of_range.stderr
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    nobody = subprocess.run(
        [
            sys.executable,
            "-m",
            "remediator",
            "sim",
            "inject",
            "--url",
            closed,
            "--node",
            target,
            "--clear",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert nobody.returncode == 1 and "cannot reach the inject API" in nobody.stderr
