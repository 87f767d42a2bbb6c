"""The node agent end to end, every part its real command: `remediator sim serve --node-root`,
`remediator run`, one `remediator agent` per simulated node (expected GPUs read from its Node on
the simulated API server), and faults injected with `remediator sim inject`. An XID 79 and a
vanished GPU become remediations from the agents' signals; an agent that stops shows as silent,
its node's health unknown, on the API and in /metrics."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.sim.launch import AGENT_ACCOUNT
from tests.fixtures.sim import SimHandle
from tests.fixtures.web import PUSH_TOKEN, free_port
from tests.integration.engine_support import ControllerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(300)]

OPERATOR = "e2e-operator-token"
POLICIES = """
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: Fence the node.
    match: {kind: xid, codes: [79]}
    priority: 100
    actions: [{action: cordon}]
  - name: gpu-missing
    description: A GPU vanished.
    why: Fence the node.
    match: {kind: gpu_missing}
    priority: 90
    actions: [{action: cordon}]
"""
SETTINGS = """
max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}
max_concurrent: 100
storm_breaker: {enabled: false}
"""


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return found


def controller_config(
    sim: SimHandle, template: Path, workdir: Path, listen: str = "127.0.0.1:0", **extra: Any
) -> Path:
    policies = workdir / "policies"
    policies.mkdir()
    (policies / "gpu.yaml").write_text(POLICIES)
    (policies / "settings.yaml").write_text(SETTINGS)
    shutil.copyfile(template, workdir / "controller.db")
    config = {
        "kubeconfig": str(sim.controller_kubeconfig),
        "policies_dir": str(policies),
        "database_url": f"sqlite:///{workdir / 'controller.db'}",
        "provider": {"url": sim.nodepool_url},
        "web": {
            "listen": listen,
            "operator_tokens": [OPERATOR],
            "push_tokens": [PUSH_TOKEN],
        },
        "leader_election": {"enabled": False},
        "poll_interval_seconds": 1.0,
        "advance_interval_seconds": 0.5,
        "agent_silent_after_seconds": 3.0,
        **extra,
    }
    (workdir / "config.yaml").write_text(json.dumps(config))
    return workdir / "config.yaml"


@pytest.fixture
def controller(
    sim: SimHandle, sqlite_head_template: Path, tmp_path: Path
) -> Iterator[ControllerProcess]:
    config = controller_config(sim, sqlite_head_template, tmp_path)
    process = ControllerProcess(tmp_path, config, "controller").wait_ready()
    yield process
    process.proc.terminate()
    process.proc.wait(timeout=30)


@pytest.fixture
def sim(sim_factory: Callable[..., SimHandle], tmp_path: Path) -> SimHandle:
    return sim_factory(nodes=4, node_root=tmp_path / "nodes")


def kube_access(sim: SimHandle, workdir: Path) -> list[str]:
    """The agent reads its Node as its own ServiceAccount, as its DaemonSet pod would."""
    token = workdir / "agent-token"
    token.write_text(sim.service_accounts[AGENT_ACCOUNT]["token"])
    return [
        "--kube-url",
        sim.kube_url,
        "--kube-token-file",
        str(token),
        "--kube-ca-file",
        str(sim.kube_ca),
    ]


def start_agent(sim: SimHandle, node: str, url: str, workdir: Path) -> subprocess.Popen[bytes]:
    assert sim.node_root is not None
    host = sim.node_root / node
    with (workdir / f"agent-{node}.log").open("ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "remediator",
                "agent",
                "--node",
                node,
                "--controller-url",
                url,
                "--state-dir",
                str(workdir / "agents" / node),
                "--host-root",
                str(host),
                "--kmsg",
                str(host / "dev/kmsg"),
                *kube_access(sim, workdir),
                "--heartbeat-interval",
                "0.5",
                "--presence-interval",
                "0.5",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "REMEDIATOR_AGENT_TOKEN": PUSH_TOKEN},
        )


def inject(sim: SimHandle, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "remediator", "sim", "inject", "--url", sim.inject_url, *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_agents_turn_kernel_xids_and_vanished_gpus_into_remediations(
    sim: SimHandle, controller: ControllerProcess, tmp_path: Path
) -> None:
    api = httpx.Client(base_url=controller.web_url, headers={"Authorization": f"Bearer {OPERATOR}"})
    nodes = sorted(n for n in sim.kubectl("get", "nodes", "-o", "name").split())
    names = [n.removeprefix("node/") for n in nodes]
    agents = {name: start_agent(sim, name, controller.web_url, tmp_path) for name in names}
    try:
        wait_for(
            "every agent reporting",
            lambda: (
                sum(
                    a["liveness"] == "reporting" and a["seen_at"] is not None
                    for a in api.get("/api/v1/agents").json()
                )
                == len(names)
            ),
        )
        xid_node, missing_node, silent_node = names[0], names[1], names[2]
        inject(sim, "--node", xid_node, "--gpu", "3", "--xid", "79")
        inject(sim, "--node", missing_node, "--gpu", "2", "--gpu-missing")

        def remediation(node: str) -> dict[str, Any] | None:
            items = api.get("/api/v1/remediations", params={"node": node}).json()["items"]
            return items[0] if items else None

        xid = wait_for("the XID remediation", lambda: remediation(xid_node))
        assert (xid["policy"], xid["signal_kind"], xid["xid_code"]) == ("xid-79", "xid", 79)
        gone = wait_for("the gpu_missing remediation", lambda: remediation(missing_node))
        assert (gone["policy"], gone["signal_kind"]) == ("gpu-missing", "gpu_missing")
        signals = api.get(f"/api/v1/nodes/{xid_node}").json()["signals"]
        agent_signal = next(s["signal"] for s in signals if s["signal"]["source"] == "agent")
        assert agent_signal["gpu"] == 3 and agent_signal["labels"]["pci"] == "0000:5d:00"

        agents[silent_node].terminate()
        assert agents[silent_node].wait(timeout=30) == 0
        silent = wait_for(
            "the stopped agent shown silent",
            lambda: [
                a
                for a in api.get("/api/v1/agents").json()
                if a["node"] == silent_node and a["liveness"] == "silent"
            ],
        )
        assert silent[0]["node_health"] == "unknown"
        metrics = wait_for(
            "the gauge",
            lambda: (
                text
                if f'remediator_agent_up{{node="{silent_node}"}} 0.0'
                in (text := httpx.get(f"{controller.web_url}/metrics").text)
                else None
            ),
        )
        assert f'remediator_agent_up{{node="{xid_node}"}} 1.0' in metrics
        assert "remediator_agents_silent 1.0" in metrics
    finally:
        for proc in agents.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)


def queued(state: Path) -> int:
    if not (state / "agent.db").exists():
        return 0
    with sqlite3.connect(state / "agent.db") as db:
        (count,) = db.execute("SELECT count(*) FROM queue").fetchone()
    return int(count)


def test_an_xid_queued_through_a_long_outage_is_remediated_when_the_controller_returns(
    sim: SimHandle, sqlite_head_template: Path, tmp_path: Path
) -> None:
    """The controller is down longer than `signals.push_max_age_seconds`: the XID the agent
    queued meanwhile is older than that bound when it arrives, and is still a fault to act on
    (a kernel event is decided by its own time; only gauge readings age out that fast)."""
    max_age = 2.0
    port = free_port()
    config = controller_config(
        sim,
        sqlite_head_template,
        tmp_path,
        listen=f"127.0.0.1:{port}",
        signals={"push_max_age_seconds": max_age},
    )
    node = sorted(
        n.removeprefix("node/") for n in sim.kubectl("get", "nodes", "-o", "name").split()
    )[0]
    url = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {OPERATOR}"})
    controller: ControllerProcess | None = ControllerProcess(tmp_path, config, "controller")
    controller = controller.wait_ready()
    agent = start_agent(sim, node, url, tmp_path)
    try:
        wait_for(
            "the agent reporting",
            lambda: [a for a in api.get("/api/v1/agents").json() if a["node"] == node],
        )
        controller.stop()  # the outage
        controller = None
        inject(sim, "--node", node, "--gpu", "3", "--xid", "79")
        state = tmp_path / "agents" / node
        wait_for("the XID queued while the controller is down", lambda: queued(state) >= 1)
        queued_at = time.monotonic()
        # The outage outlasts the age bound: wait on the clock itself, a bounded wait.
        wait_for(
            "the outage to outlast the age bound",
            lambda: time.monotonic() - queued_at > 2 * max_age,
        )
        controller = ControllerProcess(tmp_path, config, "controller").wait_ready()
        wait_for("the queue delivered", lambda: queued(state) == 0)

        def remediation() -> dict[str, Any] | None:
            items = api.get("/api/v1/remediations", params={"node": node}).json()["items"]
            return items[0] if items else None

        found = wait_for("the late XID's remediation", remediation)
        assert (found["policy"], found["xid_code"]) == ("xid-79", 79)
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(timeout=30)
        if controller is not None:
            controller.stop()
    log = (tmp_path / f"agent-{node}.log").read_text()
    assert "controller refused" not in log, log
