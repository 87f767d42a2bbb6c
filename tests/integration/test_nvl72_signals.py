"""The #29 signals read from the NVL72 simulator's output (sim29): the agent's parsers on a
tray's kernel log, Fabric Manager log, `systemctl is-active` and `nvidia-smi -q` after a fatal
SXid on a switch tray, and the Prometheus source's per-link NVLink signals from its exporter."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediator.agent.fabric import parse_fabric, parse_fabric_manager_line, parse_is_active
from remediator.agent.kmsg import parse_record
from remediator.signals.model import SignalKind
from remediator.signals.sources.prometheus import (
    PrometheusQueries,
    PrometheusSource,
    PrometheusSourceConfig,
)
from remediator.signals.sxid import parse_sxid_line
from remediator.sim.rack.topology import cluster_uuid
from tests.fixtures.prometheus import PrometheusFactory
from tests.fixtures.sim import SimHandle, start_sim
from tests.integration.test_sim_hardware import job_log

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TRAY = "nvl-r0-t04"
FAULT = ("--rack", "0", "--switch", "3", "--sxid", "20034", "--fatal")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    workdir = tmp_path_factory.mktemp("sim-nvl72-signals")
    handle = start_sim(
        workdir,
        rbac=False,
        node_root=workdir / "hosts",
        extra_args=("--topology", "nvl72", "--racks", "1"),
    )
    yield handle
    handle.stop()


def test_a_fatal_sxid_as_the_agent_and_prometheus_read_it(
    sim: SimHandle, prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    assert sim.node_root is not None
    prometheus = prometheus_factory([f"{sim.metrics_url}/metrics"], scrape_interval="1s")
    prometheus.wait_for("count(DCGM_FI_DEV_NVLINK_GET_STATE == 1)", lambda r: bool(r))
    injected = subprocess.run(
        [sys.executable, "-m", "remediator", "sim", "inject", "--url", sim.inject_url, *FAULT],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert injected.returncode == 0, injected.stderr

    records = (sim.node_root / TRAY / "dev/kmsg").read_text().splitlines()
    messages = [r.message for line in records if (r := parse_record(line)) is not None]
    sxids = [s for m in messages if (s := parse_sxid_line(m)) is not None]
    assert [s.detail for s in sxids] == [False, True]
    fatal = sxids[0]
    assert (fatal.switch, fatal.pci, fatal.code, fatal.fatal) == (6, "0000:8c:00.0", 20034, True)
    assert fatal.link is not None and fatal.raw is None

    fm = (sim.node_root / TRAY / "var/log/fabricmanager.log").read_text().splitlines()
    errors = [e for line in fm if (e := parse_fabric_manager_line(line)) is not None]
    assert any("fatal error 20034" in e.message for e in errors), errors
    code, active = job_log(sim, tmp_path, "fm", TRAY, "systemctl is-active nvidia-fabricmanager")
    state = parse_is_active(active, code)
    assert state.present and not state.healthy and state.state == "failed"
    code, report = job_log(sim, tmp_path, "smi-q", TRAY, "nvidia-smi -q")
    assert code == 0
    gpus = parse_fabric(report)
    assert len(gpus) == 4
    assert {(g.cluster_uuid, g.clique_id, g.registered) for g in gpus} == {
        (cluster_uuid(0), 0, False)
    }

    source = PrometheusSource(
        PrometheusSourceConfig(
            url=prometheus.url,
            queries=PrometheusQueries.with_windows(counters="30s"),
            staleness_seconds=30,
            timeout_seconds=10,
        )
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            result = source.poll(datetime.now(UTC))
            down = [
                s
                for s in result.signals
                if s.kind is SignalKind.NVLINK and s.node == TRAY and s.code == 1
            ]
            if len(down) == 8:
                break
            assert time.monotonic() < deadline, (result.health, down)
            time.sleep(1.0)
        # Switch tray 3 carries links 6 and 7 of every GPU.
        assert {(s.gpu, s.labels["link"]) for s in down} == {
            (g, link) for g in range(4) for link in ("6", "7")
        }
    finally:
        source.close()
