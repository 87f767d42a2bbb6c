"""The engine tests' harness: a real simulator subprocess, the real controller in-process (its
scheduler and jobs running, leader election off), and helpers to push signals, inject faults and
wait for states. Policies are written per test with short grace periods so a full flow takes
seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.settings import Settings
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import Source
from remediator.store.db import make_engine, make_session_factory
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import Repository
from tests.fixtures.sim import SimHandle

FLOW_POLICY = """
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: A GPU off the bus is dead to every job on the node.
    match:
      kind: xid
      codes: [79]
    priority: 100
    actions:
      - action: notify
      - action: cordon
      - action: checkpoint
        min_grace: 1s
        max_grace: {drain_grace}s
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
"""

SETTINGS = """
max_unhealthy:
  per_pool: {{percent: {pool_percent}}}
  cluster: {{percent: {cluster_percent}}}
max_concurrent: {max_concurrent}
storm_breaker: {{enabled: true, max_new_faults: {max_new_faults}, window: 5m}}
default_cooldown: 1h
"""


def write_policies(
    directory: Path,
    *,
    drain_grace: int = 2,  # the one grace (the checkpoint step's max_grace) the pods get
    pool_percent: int = 50,
    cluster_percent: int = 50,
    max_concurrent: int = 10,
    max_new_faults: int = 20,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "xid.yaml").write_text(FLOW_POLICY.format(drain_grace=drain_grace))
    (directory / "settings.yaml").write_text(
        SETTINGS.format(
            pool_percent=pool_percent,
            cluster_percent=cluster_percent,
            max_concurrent=max_concurrent,
            max_new_faults=max_new_faults,
        )
    )
    return directory


OPERATOR_HEADERS = {"Authorization": "Bearer operator-token"}  # write_process_config's token


def settings_for(sim: SimHandle, database_url: str, policies: Path, **overrides: Any) -> Settings:
    provider = {"url": sim.nodepool_url, "timeout_seconds": 2.0, "max_retries": 3}
    provider.update(overrides.pop("provider", {}))
    values: dict[str, Any] = {
        "kubeconfig": sim.controller_kubeconfig,
        "policies_dir": policies,
        "database_url": database_url,
        "provider": provider,
        "web": {"listen": "127.0.0.1:0", "operator_tokens": ["operator-token"]},
        "leader_election": {"enabled": False},
        "poll_interval_seconds": 1.0,
        "advance_interval_seconds": 0.2,
    }
    values.update(overrides)
    return Settings(**values)


def xid(node: str, code: int = 79, gpu: int = 0) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind.XID,
        source="push",
        observed_at=datetime.now(UTC),
        gpu=gpu,
        code=code,
    )


@dataclass
class Engine:
    sim: SimHandle
    controller: Controller
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10.0))

    @property
    def repository(self) -> Any:
        return self.controller.repository

    def push(self, *signals: Signal) -> None:
        self.controller.inbox.put(list(signals))

    def remediations(self) -> list[RemediationRecord]:
        return list(self.repository.list(RemediationFilter(), limit=500).rows)

    def of_node(self, node: str) -> RemediationRecord | None:
        found = self.repository.list(RemediationFilter(node=node), limit=1).rows
        return self.repository.get(found[0].id) if found else None

    def wait_state(self, node: str, *states: State, timeout: float = 60.0) -> RemediationRecord:
        deadline = time.monotonic() + timeout
        while True:
            record = self.of_node(node)
            if record is not None and record.state in states:
                return record
            if time.monotonic() > deadline:
                seen = record.state.value if record else "no remediation"
                events = (
                    [(e.to_state, e.action, dict(e.detail)) for e in record.events]
                    if record
                    else []
                )
                raise AssertionError(f"{node}: still {seen}, wanted {states}:\n{events}")
            time.sleep(0.1)

    def spare(self, pool: str) -> int:
        response = self.http.get(f"{self.sim.nodepool_url}/v1/pools/{pool}/capacity")
        response.raise_for_status()
        value: int = response.json()["spare_capacity"]
        return value

    def nodepool_fault(self, rule: dict[str, Any]) -> None:
        response = self.http.post(f"{self.sim.inject_url}/v1/nodepool-faults", json=rule)
        assert response.status_code == 200, response.text

    def fault(self, fault: dict[str, Any]) -> None:
        response = self.http.post(f"{self.sim.inject_url}/v1/faults", json=fault)
        assert response.status_code == 200, response.text

    def node(self, name: str) -> dict[str, Any] | None:
        out = self.sim.kubectl("get", "node", name, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        out = self.sim.kubectl(
            "get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def close(self) -> None:
        self.controller.stop()
        self.http.close()


def start_engine(
    sim: SimHandle,
    database_url: str,
    policies: Path,
    *,
    sources: list[Source] | None = None,
    **overrides: Any,
) -> Engine:
    controller = Controller(
        settings_for(sim, database_url, policies, **overrides),
        sources=[] if sources is None else sources,
    )
    controller.start(serve_web=False)
    return Engine(sim, controller)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class WebhookSink:
    """A loopback HTTP receiver standing in for the on-call chat's incoming webhook."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                sink.received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def texts(self) -> list[str]:
        return [str(body.get("text", "")) for body in self.received]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


CONDITION_POLICY = """
policies:
  - name: gpu-off-bus
    description: The node reports a GPU fallen off the bus as a node condition.
    why: A dead GPU; the condition stays until the node is replaced, so no signal is lost.
    match:
      kind: node_condition
      labels:
        type: GpuFallenOffBus
    priority: 100
    actions:
      - action: cordon
      - action: checkpoint
        max_grace: 1s
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
"""


def provider_setting(sim: SimHandle) -> dict[str, Any]:
    """The simulator's own `provider:` object, with short timeouts for the tests."""
    if sim.cloud == "http":
        return {"url": sim.nodepool_url, "timeout_seconds": 2.0, "max_retries": 2}
    if sim.cloud == "aws":
        return {**sim.provider, "timeout_seconds": 2.0, "max_retries": 2}
    if sim.cloud == "gce":
        return {**sim.provider, "timeout_seconds": 2.0}
    return dict(sim.provider)


PROCESS_SETTINGS = SETTINGS.format(
    pool_percent=100, cluster_percent=100, max_concurrent=50, max_new_faults=100
)


def write_process_config(
    workdir: Path,
    sim: SimHandle,
    database_url: str,
    *,
    leader_election: dict[str, Any] | None = None,
) -> Path:
    """Policies (node-condition driven, so a crash loses no signal) and a settings file for
    `remediator run`."""
    policies = workdir / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    (policies / "gpu.yaml").write_text(CONDITION_POLICY)
    (policies / "settings.yaml").write_text(PROCESS_SETTINGS)
    config = {
        "kubeconfig": str(sim.controller_kubeconfig),
        "policies_dir": str(policies),
        "database_url": database_url,
        "provider": provider_setting(sim),
        "web": {"listen": "127.0.0.1:0", "operator_tokens": ["operator-token"]},
        "leader_election": leader_election or {"enabled": False},
        "poll_interval_seconds": 0.5,
        "advance_interval_seconds": 0.2,
    }
    path = workdir / "config.yaml"
    path.write_text(json.dumps(config))
    return path


# `remediator run` with its imports done ahead: it waits for "go" on stdin (and exits on EOF),
# then runs exactly as `python -m remediator run ...` would.
PREPARED = """
import sys
from remediator.cli import build_parser, main
build_parser()
import remediator.controller.app, remediator.doctor.run, remediator.providers.select
import remediator.providers.aws, remediator.providers.clusterapi, remediator.providers.gce
import remediator.providers.http
if sys.stdin.readline().strip() != "go":
    raise SystemExit(0)
raise SystemExit(main(sys.argv[1:]))
"""


class ControllerProcess:
    """The real `remediator run` as a subprocess; its JSON log lines go to a file.

    `prepared`: the process starts now but only imports (the bulk of a start on a loaded
    machine: 40 s at load 16) and waits for `go()`; a test that restarts the controller many
    times prepares the next one while the current one works."""

    def __init__(
        self,
        workdir: Path,
        config: Path,
        name: str,
        identity: str | None = None,
        *,
        prepared: bool = False,
    ) -> None:
        self.workdir = workdir
        self.ready_file = workdir / f"{name}.ready.json"
        self.log_path = workdir / f"{name}.log"
        self.ready_file.unlink(missing_ok=True)
        env = dict(os.environ)
        if identity is not None:
            env["REMEDIATOR_LEADER_ELECTION__IDENTITY"] = identity
        command = ["run", "--config", str(config), "--ready-file", str(self.ready_file)]
        start = ["-c", PREPARED] if prepared else ["-m", "remediator"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, *start, *command],
                stdin=subprocess.PIPE if prepared else None,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.web_url = ""

    def go(self) -> ControllerProcess:
        """Let a prepared process run."""
        assert self.proc.stdin is not None, "not a prepared process"
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.close()
        return self

    def wait_ready(self, timeout: float = 180.0) -> ControllerProcess:
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"controller did not start:\n{self.log_tail()}")
            time.sleep(0.05)
        self.web_url = json.loads(self.ready_file.read_text())["web_url"]
        return self

    def metric(self, name: str) -> float | None:
        response = httpx.get(f"{self.web_url}/metrics", timeout=30.0)
        for line in response.text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class ProcessRun:
    """What the end-to-end files share around the real `remediator run`: its config for a
    simulator (write_process_config, plus `config` on top and `policies`, file name → YAML, in
    place of the default ones), the store read directly, the controller started, and waits on a
    node's latest remediation that say where it stood when they time out."""

    def __init__(
        self,
        sim: SimHandle,
        workdir: Path,
        database_url: str,
        *,
        policies: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.sim = sim
        self.workdir = workdir
        self.config = write_process_config(workdir, sim, database_url)
        if config:
            self.config.write_text(json.dumps({**json.loads(self.config.read_text()), **config}))
        if policies is not None:
            directory = workdir / "policies"
            for stale in directory.glob("*.yaml"):
                stale.unlink()
            for name, text in policies.items():
                (directory / name).write_text(text)
        self.repository = Repository(make_session_factory(make_engine(database_url)), "default")
        self.runs = 0
        self.controller = self.start()

    def start(self) -> ControllerProcess:
        self.runs += 1
        name = "run" if self.runs == 1 else f"run-{self.runs}"
        return ControllerProcess(self.workdir, self.config, name).wait_ready()

    def close(self) -> None:
        self.controller.stop()

    def records(self, node: str) -> list[RemediationRecord]:
        """The node's remediations, oldest first."""
        history = self.repository.node_history(node).remediations
        found = [self.repository.get(r.id) for r in history]
        return sorted((r for r in found if r is not None), key=lambda r: r.id)

    def record(self, node: str) -> RemediationRecord | None:
        found = self.records(node)
        return found[-1] if found else None

    def wait(self, node: str, *states: State, timeout: float = 120.0) -> RemediationRecord:
        """The node's latest remediation once it is in one of `states`."""
        found: list[RemediationRecord] = []

        def reached() -> bool:
            record = self.record(node)
            found[:] = [record] if record is not None else []
            return record is not None and record.state in states

        try:
            wait_for(reached, timeout=timeout, what=f"{node} in {states}")
        except AssertionError as exc:
            last = [(e.action, dict(e.detail)) for e in found[0].events[-6:]] if found else []
            raise AssertionError(f"{exc}\n{last}\n{self.controller.log_tail()}") from exc
        return found[0]

    def push_xid(self, node: str, code: int, gpu: int = 0) -> None:
        """An XID as the node agent pushes it, to the running controller's API."""
        signal = {
            "node": node,
            "kind": "xid",
            "source": "agent",
            "observed_at": datetime.now(UTC).isoformat(),
            "gpu": gpu,
            "code": code,
        }
        url = f"{self.controller.web_url}/api/v1/signals"
        answer = httpx.post(url, json=[signal], headers=OPERATOR_HEADERS, timeout=30)
        assert answer.status_code == 202, answer.text

    def node(self, name: str) -> dict[str, Any] | None:
        out = self.sim.kubectl("get", "nodes", "-o", "json")
        return next((n for n in json.loads(out)["items"] if n["metadata"]["name"] == name), None)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        out = self.sim.kubectl(
            "get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "json"
        )
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items
