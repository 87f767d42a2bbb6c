"""Rack faults of `sim serve --topology nvl72 --racks 2` end to end: an NVSwitch SXid injected
with the real CLI lands, in the driver's format, in the kernel log of every compute tray of its
rack and of no other, Fabric Manager logs it and (fatal) stops, a real Prometheus sees the switch
tray's NVLinks down on every GPU of the rack, and `nvidia-smi -q` / `systemctl is-active` in Jobs
report the fabric; a rack power loss takes its 18 trays NotReady together and a clear brings them
back; bad rack faults are refused with the reason."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.sim.rack.topology import cluster_uuid
from tests.fixtures.prometheus import PrometheusFactory
from tests.fixtures.sim import SimHandle, start_sim
from tests.integration.test_sim_hardware import job_log

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WAIT = 120.0
SXID_LINE = re.compile(
    r"^\d,\d+,\d+,-;nvidia-nvswitch6: SXid \(PCI:0000:8c:00\.0\): 20034, Fatal, Link \d+ "
    r"LTSSM Fault Up$"
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    workdir = tmp_path_factory.mktemp("sim-nvl72-faults")
    handle = start_sim(
        workdir,
        rbac=False,
        node_root=workdir / "hosts",
        extra_args=("--topology", "nvl72", "--racks", "2"),
    )
    yield handle
    handle.stop()


def cli_inject(sim: SimHandle, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "remediator", "sim", "inject", "--url", sim.inject_url, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT:.0f}s: {what}")
        time.sleep(0.5)


def kmsg(sim: SimHandle, tray: str) -> list[str]:
    assert sim.node_root is not None
    return (sim.node_root / tray / "dev/kmsg").read_text().splitlines()


def fm_log(sim: SimHandle, tray: str) -> str:
    assert sim.node_root is not None
    path = sim.node_root / tray / "var/log/fabricmanager.log"
    return path.read_text() if path.exists() else ""


def ready_status(sim: SimHandle, rack: int) -> set[str]:
    nodes = json.loads(
        sim.kubectl("get", "nodes", "-l", f"remediator.io/rack=rack-{rack}", "-o", "json")
    )["items"]
    assert len(nodes) == 18
    return {
        next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready") for n in nodes
    }


def test_fatal_sxid_reaches_every_tray_of_its_rack_and_the_telemetry(
    sim: SimHandle, prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    prometheus = prometheus_factory([f"{sim.metrics_url}/metrics"], scrape_interval="1s")
    prometheus.wait_for(
        "count(DCGM_FI_DEV_NVLINK_GET_STATE == 1)",
        lambda r: bool(r) and r[0]["value"][1] == str(36 * 4 * 18),
    )
    code, before = job_log(
        sim, tmp_path, "fm-before", "nvl-r0-t04", "systemctl is-active nvidia-fabricmanager"
    )
    assert (code, before) == (0, "active\n")

    done = cli_inject(sim, "--rack", "0", "--switch", "3", "--sxid", "20034", "--fatal")
    assert done.returncode == 0, done.stderr
    assert "fatal SXid 20034 on NVSwitch tray 3 of rack 0" in done.stdout

    for slot in range(18):
        tray = f"nvl-r0-t{slot:02d}"
        lines = [line for line in kmsg(sim, tray) if "SXid" in line]
        assert len(lines) == 2, (tray, lines)
        assert SXID_LINE.match(lines[0]), lines[0]
        assert lines[0].startswith("3,")  # KERN_ERR
        assert "20034, Severity 1 Engine instance" in lines[1]
        assert re.search(
            r"^\[\w{3} \d\d \d{4} \d\d:\d\d:\d\d\] \[ERROR\] \[tid \d+\] detected NVSwitch "
            r"fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:8c:00\.0 physical id 6 "
            r"port \d+$",
            fm_log(sim, tray),
            re.MULTILINE,
        ), fm_log(sim, tray)
    for slot in range(18):
        assert not any("SXid" in line for line in kmsg(sim, f"nvl-r1-t{slot:02d}"))

    # Switch tray 3 carries links 6 and 7 of every GPU: down on all 72 GPUs of rack 0 only.
    down = prometheus.wait_for("DCGM_FI_DEV_NVLINK_GET_STATE == 0", lambda r: len(r) == 18 * 4 * 2)
    assert {s["metric"]["nvlink"] for s in down} == {"6", "7"}
    assert {s["metric"]["Hostname"][:6] for s in down} == {"nvl-r0"}
    status = prometheus.query("DCGM_FI_DEV_FABRIC_MANAGER_STATUS != 3")
    assert {s["metric"]["Hostname"][:6] for s in status} == {"nvl-r0"} and len(status) == 72
    assert prometheus.query('DCGM_FI_DEV_FABRIC_CLIQUE_ID{Hostname="nvl-r1-t00"}')

    code, after = job_log(
        sim, tmp_path, "fm-after", "nvl-r0-t04", "systemctl is-active nvidia-fabricmanager"
    )
    assert (code, after) == (3, "failed\n")
    code, report = job_log(sim, tmp_path, "smi-q", "nvl-r0-t04", "nvidia-smi -q")
    assert code == 0
    assert report.count("GPU 00000000:") == 4
    fabric = report.split("    Fabric\n", 1)[1]
    assert re.search(r"^        State\s+: Completed$", fabric, re.MULTILINE)
    assert re.search(r"^        Status\s+: Failure$", fabric, re.MULTILINE)
    assert re.search(r"^        CliqueId\s+: 0$", fabric, re.MULTILINE)
    assert re.search(rf"^        ClusterUUID\s+: {cluster_uuid(0)}$", fabric, re.MULTILINE)
    assert re.search(r"^            Bandwidth\s+: Degraded$", fabric, re.MULTILINE)
    assert re.search(r"^        Slot Number\s+: 4$", report, re.MULTILINE)
    assert re.search(r"^        Tray Index\s+: 4$", report, re.MULTILINE)

    faults = httpx.get(f"{sim.inject_url}/v1/faults", timeout=10).json()["faults"]
    assert {"type": "sxid", "rack": 0, "switch": 3, "code": 20034, "fatal": True} in faults
    cleared = cli_inject(sim, "--rack", "0", "--clear")
    assert cleared.returncode == 0, cleared.stderr
    prometheus.wait_for("DCGM_FI_DEV_NVLINK_GET_STATE == 0", lambda r: r == [])


def test_rack_power_takes_its_trays_down_together_and_clear_brings_them_back(
    sim: SimHandle,
) -> None:
    assert ready_status(sim, 1) == {"True"}
    done = cli_inject(sim, "--rack", "1", "--rack-power")
    assert done.returncode == 0, done.stderr
    assert "rack 1 lost power: its 18 trays are NotReady" in done.stdout
    assert ready_status(sim, 1) == {"Unknown"}
    assert ready_status(sim, 0) == {"True"}
    table = sim.kubectl("get", "nodes", "-l", "remediator.io/rack=rack-1", "--no-headers")
    assert {line.split()[1] for line in table.splitlines()} == {"NotReady"}, table
    assert cli_inject(sim, "--rack", "1", "--clear").returncode == 0
    wait_for("rack 1 back", lambda: ready_status(sim, 1) == {"True"})


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"type": "sxid", "rack": 7, "switch": 0, "code": 20034}, 404, "rack_not_found"),
        ({"type": "sxid", "rack": 0, "switch": 9, "code": 20034}, 400, "invalid_fault"),
        ({"type": "rack_power", "rack": 0, "extra": 1}, 400, "invalid_fault"),
        ({"type": "xid", "rack": 0, "gpu": 0, "code": 79}, 400, "invalid_fault"),
    ],
)
def test_bad_rack_faults_are_refused(
    sim: SimHandle, body: dict[str, Any], status: int, code: str
) -> None:
    answer = httpx.post(f"{sim.inject_url}/v1/faults", json=body, timeout=10)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
