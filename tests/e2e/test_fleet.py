"""The fleet through the real CLI on a real PostgreSQL: three simulated clusters, three
`remediator run` controllers and one `remediator console` (no kubeconfig) on one database.

- faults in two clusters show in the fleet overview under the right cluster;
- an approve issued in the fleet console is carried out by that cluster's own controller (the
  only process with access to it) and audited under that cluster;
- a token scoped to cluster alpha gets 403 on bravo;
- a fourth controller configured with a name another cluster owns is refused at start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.model.states import State
from remediator.store.db import make_engine, make_session_factory
from remediator.store.repository import Repository
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import ControllerProcess, write_process_config

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(600)]

CLUSTERS = ("alpha", "bravo", "charlie")
FLEET_TOKEN = "fleet-operator-token"
ALPHA_TOKEN = "alpha-operator-token"
POLICY = """
policies:
  - name: gpu-off-bus
    description: The node reports a GPU fallen off the bus as a node condition.
    why: A dead GPU; a human approves before the node is taken out.
    match:
      kind: node_condition
      labels:
        type: GpuFallenOffBus
    priority: 100
    approval: required
    actions:
      - action: cordon
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
"""


def wait(predicate: Callable[[], bool], what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


class ConsoleProcess:
    """The real `remediator console` as a subprocess."""

    def __init__(self, workdir: Path, config: Path) -> None:
        self.ready_file = workdir / "console.ready.json"
        self.log_path = workdir / "console.log"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "remediator",
                    "console",
                    "--config",
                    str(config),
                    "--ready-file",
                    str(self.ready_file),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ),
            )
        deadline = time.monotonic() + 60
        while not self.ready_file.exists():
            log_text = self.log_path.read_text(errors="replace")
            assert self.proc.poll() is None, f"console exited:\n{log_text}"
            assert time.monotonic() < deadline, f"console did not start:\n{log_text}"
            time.sleep(0.05)
        self.web_url = json.loads(self.ready_file.read_text())["web_url"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _cluster_config(workdir: Path, sim: SimHandle, url: str, name: str) -> Path:
    config = write_process_config(workdir, sim, url)
    (workdir / "policies" / "gpu.yaml").write_text(POLICY)
    data: dict[str, Any] = json.loads(config.read_text())
    data["cluster_name"] = name
    config.write_text(json.dumps(data))
    return config


def test_three_clusters_one_database_one_fleet_console(
    sim_factory: Callable[..., SimHandle], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    url = postgres_server.url(postgres_server.migrated_database())
    sims = {name: sim_factory(nodes=3, provision_delay=0.2) for name in CLUSTERS}
    controllers: dict[str, ControllerProcess] = {}
    console: ConsoleProcess | None = None
    intruder: ControllerProcess | None = None
    engine = make_engine(url)
    repos = {name: Repository(make_session_factory(engine), name) for name in CLUSTERS}
    try:
        for name in CLUSTERS:
            workdir = tmp_path / name
            workdir.mkdir()
            config = _cluster_config(workdir, sims[name], url, name)
            controllers[name] = ControllerProcess(workdir, config, name, identity=f"{name}-0")
        for process in controllers.values():
            process.wait_ready(timeout=120)
        console_config = tmp_path / "console.yaml"
        console_config.write_text(
            json.dumps(
                {
                    "database_url": url,
                    "web": {
                        "listen": "127.0.0.1:0",
                        "operator_tokens": [
                            FLEET_TOKEN,
                            {"token": ALPHA_TOKEN, "clusters": ["alpha"]},
                        ],
                    },
                }
            )
        )
        console = ConsoleProcess(tmp_path, console_config)
        fleet = httpx.Client(
            base_url=console.web_url,
            headers={"Authorization": f"Bearer {FLEET_TOKEN}"},
            timeout=30.0,
        )

        # Faults in alpha and bravo; charlie stays healthy.
        faulted = {}
        for name in ("alpha", "bravo"):
            node = sims[name].kubectl("get", "nodes", "-o", "name").split()[0].split("/")[-1]
            faulted[name] = node
            inject = httpx.post(
                f"{sims[name].inject_url}/v1/faults",
                json={
                    "type": "condition",
                    "node": node,
                    "condition": "GpuFallenOffBus",
                    "status": "True",
                },
                timeout=10.0,
            )
            assert inject.status_code == 200, inject.text

        def figures() -> dict[str, dict[str, Any]]:
            answer = fleet.get("/api/v1/clusters")
            assert answer.status_code == 200, answer.text
            return {c["name"]: c for c in answer.json()["items"]}

        wait(
            lambda: [figures()[n]["waiting_for_human"] for n in CLUSTERS] == [1, 1, 0],
            "both faults awaiting approval in the fleet overview",
        )
        shown = figures()
        assert sorted(shown) == list(CLUSTERS)
        assert all(shown[n]["registered"] for n in CLUSTERS)
        waiting = fleet.get("/api/v1/fleet/waiting").json()["items"]
        assert {(w["cluster"], w["node"]) for w in waiting} == {
            ("alpha", faulted["alpha"]),
            ("bravo", faulted["bravo"]),
        }
        page = fleet.get("/fleet")
        assert page.status_code == 200 and 'data-cluster="charlie"' in page.text

        # Approve alpha's in the fleet console: alpha's controller carries it out.
        alpha_id = next(w["id"] for w in waiting if w["cluster"] == "alpha")
        approved = fleet.post(
            f"/api/v1/remediations/{alpha_id}/approve",
            json={"reason": "checked from the fleet console"},
            headers={"X-Remediator-Actor": "ana"},
        )
        assert approved.status_code == 200, approved.text

        def alpha_done() -> bool:
            record = repos["alpha"].get(alpha_id)
            return record is not None and record.state is State.SUCCEEDED

        wait(alpha_done, "alpha's controller to carry out the approved remediation")
        record = repos["alpha"].get(alpha_id)
        assert record is not None
        actors = {e.actor for e in record.events if e.to_state is not State.QUARANTINED}
        assert actors == {"controller alpha-0"}, actors
        bravo_open = repos["bravo"].list_open()
        assert [r.state for r in bravo_open] == [State.AWAITING_APPROVAL]
        assert figures()["alpha"]["waiting_for_human"] == 0
        audit = fleet.get("/api/v1/audit", params={"cluster": "alpha"}).json()["items"]
        assert [(a["command"], a["remediation_id"], a["outcome"]) for a in audit] == [
            ("approve", alpha_id, "done")
        ]
        assert fleet.get("/api/v1/audit", params={"cluster": "bravo"}).json()["items"] == []

        # A token scoped to alpha reads alpha and nothing of bravo.
        scoped = httpx.Client(
            base_url=console.web_url,
            headers={"Authorization": f"Bearer {ALPHA_TOKEN}"},
            timeout=30.0,
        )
        assert scoped.get("/api/v1/remediations", params={"cluster": "alpha"}).status_code == 200
        refused = scoped.get("/api/v1/remediations", params={"cluster": "bravo"})
        assert refused.status_code == 403, refused.text
        bravo_id = bravo_open[0].id
        assert scoped.post(f"/api/v1/remediations/{bravo_id}/approve", json={}).status_code == 403
        assert [c["name"] for c in scoped.get("/api/v1/clusters").json()["items"]] == ["alpha"]

        # Another cluster (bravo's simulator, so another kube-system UID) under alpha's name.
        intruder_dir = tmp_path / "intruder"
        intruder_dir.mkdir()
        config = _cluster_config(intruder_dir, sims["bravo"], url, "alpha")
        intruder = ControllerProcess(intruder_dir, config, "intruder", identity="intruder-0")
        assert intruder.proc.wait(timeout=120) == 1
        assert "cluster name 'alpha' belongs to another cluster" in intruder.log_tail()
        assert repos["bravo"].get(bravo_id) is not None
    finally:
        for process in [*controllers.values(), *([intruder] if intruder else [])]:
            process.stop()
        if console is not None:
            console.stop()
        engine.dispose()
