"""Everything the soak starts, and stops: the simulator (with a real Slurm), Prometheus scraping
its exporter, PostgreSQL (or an SQLite file), and the real controller as an HA pair of
`remediator run` processes electing a leader on the simulator's Lease, each started from a
config file the way tests/integration/engine_support.py does it.

Everything listens on 127.0.0.1. Stopping goes from the top down (controllers first, so that
nothing acts on a cluster going away; the simulator, which cancels the Slurm jobs and waits for
their steps before its daemons stop; Prometheus; PostgreSQL), and ends with a scan for anything
the soak started that is still alive (tests/fixtures/processes.py: a token every child inherits,
or a file held open under the soak's directory), which is killed and reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.soak.database import Postgres, sqlite_database
from remediator.demo.slurm_jobs import submit_demo_jobs
from remediator.settings import Settings
from remediator.sim.launch import SimHandle, start_sim
from remediator.sim.slurm.machines import SLURM_NODE_LABEL
from tests.fixtures.processes import (
    SETTLE_SECONDS,
    TOKEN_VAR,
    Leftover,
    mark_this_process,
    scan,
)
from tests.fixtures.prometheus import PrometheusHandle, free_port, scrape_config
from tests.integration.engine_support import ControllerProcess

QUARANTINE_TAINT = "remediator.io/quarantine"
OPERATOR_TOKEN = "soak-operator"
READER_TOKEN = "soak-reader"
LEASE_NAMESPACE, LEASE_NAME = "remediator", "remediator-leader"
# Renewals must keep up on a loaded two-core machine (tests/integration/test_controller_leader).
LEASE = {
    "enabled": True,
    "namespace": LEASE_NAMESPACE,
    "lease_name": LEASE_NAME,
    "lease_duration_seconds": 6,
    "renew_deadline_seconds": 4,
    "retry_period_seconds": 1,
}
CONTROLLER_START_SECONDS = 240.0
SPARE_NODES = 100  # per pool: the soak never runs the cloud dry by accident
PROVISION_DELAY = 3.0
PROGRAM_TIME_SCALE = 0.5  # validation's DCGM and NCCL runs, half as long

# The soak's budgets are counts, not percents, so the checker's bound does not move while a
# replacement takes a node out of a pool (docs/safety.md I5).
PER_POOL, CLUSTER, MAX_CONCURRENT, MAX_REPLACEMENTS = 3, 5, 5, 1
FLOORS = '{"NVIDIA H100 80GB HBM3": 400, "NVIDIA A100-SXM4-80GB": 180}'
POLICIES = f"""
policies:
  - name: soak-xid-79
    description: The GPU has fallen off the bus.
    why: Requeue the node's jobs, replace it, burn in the new machine.
    match: {{kind: xid, codes: [79]}}
    priority: 100
    actions:
      - action: notify
      - action: cordon
      - action: checkpoint
        min_grace: 1s
        max_grace: 5s
      - action: drain
        timeout: 30s
        on_timeout: force
      - action: replace
      - action: validate
        dcgm_level_new: 2
        nccl: true
        busbw_floor: {FLOORS}
        max_replacements: {MAX_REPLACEMENTS}

  - name: soak-xid-48-95
    description: Double-bit ECC or an uncontained memory error.
    why: Reset the GPU and check it; replace the node when it stays bad.
    match: {{kind: xid, codes: [48, 95]}}
    priority: 90
    on_failure: replace
    actions:
      - action: cordon
      - action: checkpoint
        min_grace: 1s
        max_grace: 5s
      - action: drain
        timeout: 30s
        on_timeout: force
      - action: reset_gpu
        timeout: 1m
      - action: diagnose
        level: 2
        timeout: 2m
      - action: validate
        dcgm_level: 2
        busbw_floor: {FLOORS}
      - action: uncordon

  - name: soak-nvlink-bursts
    description: NVLink counters rose on three GPUs.
    why: The node's links are bad.
    match:
      kind: nvlink
      threshold: {{above: 1}}
      burst: {{count: 3, within: 10m}}
    priority: 70
    actions:
      - action: cordon
      - action: checkpoint
        min_grace: 1s
        max_grace: 5s
      - action: drain
        timeout: 30s
        on_timeout: force
      - action: replace
      - action: validate
        dcgm_level_new: 2
        busbw_floor: {FLOORS}
        max_replacements: {MAX_REPLACEMENTS}
"""
SETTINGS = f"""
max_unhealthy:
  per_pool: {{count: {PER_POOL}}}
  cluster: {{count: {CLUSTER}}}
max_concurrent: {MAX_CONCURRENT}
storm_breaker: {{enabled: true, max_new_faults: 100, window: 5m}}
default_cooldown: 5m
"""


class Kube:
    """Plain HTTP reads of the simulated apiserver with the admin kubeconfig's token (what
    kubectl would send): the checker's view of Kubernetes, never the controller's."""

    def __init__(self, sim: SimHandle) -> None:
        self._sim = sim
        self._client = self.http(10.0)
        self._lock = threading.Lock()

    def http(self, timeout: float | httpx.Timeout) -> httpx.Client:
        """A client of its own (token, CA), for a reader on another thread."""
        client = self._sim.kube_http(timeout)
        client.headers["User-Agent"] = "soak-checker"
        return client

    def get(self, path: str, **params: str) -> dict[str, Any]:
        with self._lock:
            response = self._client.get(path, params=params)
        response.raise_for_status()
        found: dict[str, Any] = response.json()
        return found

    def nodes(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("/api/v1/nodes")["items"]
        return items

    def opt_out_hosts(self) -> set[str]:
        pods = self.get("/api/v1/pods", labelSelector="remediator.io/disable-auto-replace")
        return {p["spec"]["nodeName"] for p in pods["items"] if p["spec"].get("nodeName")}

    def leader(self) -> str | None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{LEASE_NAME}"
        try:
            holder = self.get(path).get("spec", {}).get("holderIdentity")
        except httpx.HTTPError:
            return None
        return str(holder) if holder else None

    def close(self) -> None:
        self._client.close()


@dataclass
class Replica:
    name: str  # "a", "b": its identity is soak-<name>
    config: Path
    process: ControllerProcess | None = None

    @property
    def identity(self) -> str:
        return f"soak-{self.name}"


class Stack:
    """Starts in `start()`; `close()` stops everything and returns what was left behind."""

    def __init__(self, workdir: Path, db: str, nodes: int) -> None:
        self.workdir = workdir
        self.db = db
        self.nodes = nodes
        self.token = os.environ.get(TOKEN_VAR) or mark_this_process()
        self.postgres: Postgres | None = None
        self.sim: SimHandle | None = None
        self.prometheus: PrometheusHandle | None = None
        self.kube: Kube | None = None
        self.replicas: dict[str, Replica] = {}
        self.database_url = ""
        self.lock = threading.Lock()
        self.slurmctlds: list[subprocess.Popen[bytes]] = []  # started again by slurmctld_clean
        self.extra: list[ControllerProcess] = []  # empty_db_controller's, while it runs
        self.expected_down: set[str] = set()  # replicas the fault runner is killing right now
        self.empty_databases = 0

    # -- start ---------------------------------------------------------------------------------

    def start(self, say: Any) -> None:
        say("starting PostgreSQL…" if self.db == "postgresql" else "using SQLite…")
        if self.db == "postgresql":
            self.postgres = Postgres()
            self.database_url = self.postgres.create_database("remediator")
        else:
            self.database_url = sqlite_database(self.workdir, "remediator")
        say(f"starting the simulator ({self.nodes} nodes) with Slurm…")
        self.sim = start_sim(
            self.workdir / "sim",
            nodes=self.nodes,
            provision_delay=PROVISION_DELAY,
            slurm=True,
            program_time_scale=PROGRAM_TIME_SCALE,
        )
        self.kube = Kube(self.sim)
        for pool in sorted({n["metadata"]["labels"]["simcloud.io/nodepool"] for n in
                            self.kube.nodes()}):  # fmt: skip
            rule = {"type": "spare_capacity", "pool": pool, "spare": SPARE_NODES}
            httpx.post(f"{self.sim.inject_url}/v1/nodepool-faults", json=rule, timeout=10)
        say("starting Prometheus…")
        self.prometheus = self._prometheus()
        policies = self.workdir / "policies"
        policies.mkdir(exist_ok=True)
        (policies / "soak.yaml").write_text(POLICIES)
        (policies / "settings.yaml").write_text(SETTINGS)
        config = self.write_config("controller", self.database_url, leader_election=LEASE)
        say("starting the controllers (an HA pair)…")
        for name in ("a", "b"):
            self.replicas[name] = Replica(name, config)
        for replica in self.replicas.values():
            self.start_replica(replica)
        assert self.sim.slurm is not None
        submit_demo_jobs(self.sim.slurm, self.jobs_dir, self.nodes)

    @property
    def jobs_dir(self) -> Path:
        return self.workdir / "slurm-jobs"

    def _prometheus(self) -> PrometheusHandle:
        assert self.sim is not None
        config = scrape_config([self.sim.metrics_url], "1s", "dcgm-exporter")
        (self.workdir / "prometheus").mkdir(exist_ok=True)
        handle = PrometheusHandle(self.workdir / "prometheus", config)
        for attempt in range(3):
            try:
                handle.start()
                return handle
            except RuntimeError:
                if attempt == 2:
                    raise
                handle.use_port(free_port())  # the free port was taken in between
        return handle

    def write_config(
        self, name: str, database_url: str, *, leader_election: dict[str, Any], signals: bool = True
    ) -> Path:
        """A `remediator run` config, checked against the real Settings before any start."""
        assert self.sim is not None and self.prometheus is not None
        data: dict[str, Any] = {
            "cluster_name": "soak",
            "kubeconfig": str(self.sim.controller_kubeconfig),
            "policies_dir": str(self.workdir / "policies"),
            "database_url": database_url,
            "provider": {"url": self.sim.nodepool_url, "timeout_seconds": 5.0, "max_retries": 3},
            "prometheus_url": self.prometheus.url if signals else None,
            "web": {
                "listen": "127.0.0.1:0",
                "operator_tokens": [OPERATOR_TOKEN],
                "readonly_tokens": [READER_TOKEN],
            },
            "leader_election": leader_election,
            "poll_interval_seconds": 2.0,
            "advance_interval_seconds": 0.5,
            "slurm": dict(self.sim.slurm or {}),
        }
        Settings(**data)
        path = self.workdir / f"{name}.json"
        path.write_text(json.dumps(data, indent=2))
        return path

    def start_replica(self, replica: Replica, timeout: float = CONTROLLER_START_SECONDS) -> None:
        """Start it and wait until it serves; a start that fails (its database down under a
        `db_outage`) is tried again until `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            process = ControllerProcess(
                self.workdir, replica.config, f"controller-{replica.name}", replica.identity
            )
            with self.lock:
                replica.process = process
            try:
                process.wait_ready(timeout=max(1.0, deadline - time.monotonic()))
                return
            except AssertionError:
                process.kill()
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"controller {replica.name} did not start:\n{process.log_tail()}"
                    ) from None
                time.sleep(2.0)

    # -- reads the fault runner and the checker share ------------------------------------------

    def console_urls(self) -> list[str]:
        """The consoles that serve now, the leader's first."""
        assert self.kube is not None
        leader = self.kube.leader()
        with self.lock:
            live = [
                r for r in self.replicas.values()
                if r.process is not None and r.process.web_url and r.process.proc.poll() is None
            ]  # fmt: skip
        live.sort(key=lambda r: r.identity != leader)
        return [r.process.web_url for r in live if r.process is not None]

    def slurm_env(self) -> dict[str, str]:
        assert self.sim is not None and self.sim.slurm is not None
        conf = str(self.sim.slurm["slurm_conf"])
        output = str(Path(conf).parent / "jobs" / "slurm-%j.out")
        return {**os.environ, "SLURM_CONF": conf, "SBATCH_OUTPUT": output, "SBATCH_ERROR": output}

    def slurm(self, *args: str, timeout: float = 8.0) -> subprocess.CompletedProcess[str] | None:
        """A Slurm client command, bounded: None when it did not answer in time (slurmctld
        down: a command would retry for MessageTimeout)."""
        try:
            return subprocess.run(
                list(args),
                env=self.slurm_env(),
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return None

    # -- stop ----------------------------------------------------------------------------------

    def close(self, say: Any) -> list[Leftover]:
        for process in list(self.extra):
            process.stop()
        for replica in self.replicas.values():
            if replica.process is not None:
                replica.process.stop()
                say(f"controller {replica.name} stopped (exit {replica.process.proc.returncode})")
        if self.kube is not None:
            self.kube.close()
        if self.sim is not None:
            say(f"simulator stopped (exit {self.sim.stop()})")
        for ctld in self.slurmctlds:
            # Ours, not the simulator's: its stop leaves a slurmctld it did not start alone.
            if ctld.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(ctld.pid, signal.SIGTERM)
            try:
                ctld.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(ctld.pid, signal.SIGKILL)
                ctld.wait(timeout=10)
        if self.prometheus is not None:
            self.prometheus.stop()
        if self.postgres is not None:
            self.postgres.destroy()
        return self.left_behind()

    def left_behind(self, settle: float = SETTLE_SECONDS) -> list[Leftover]:
        """Processes of this soak still alive once those on their way out had `settle` seconds
        (then killed), not counting the soak's own ancestors (`python -m bench` carries the
        token too when a test handed it down)."""
        ancestors: set[int] = set()
        pid = os.getpid()
        while pid > 1:
            ancestors.add(pid)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                break
            pid = int(stat.rsplit(")", 1)[1].split()[1])

        def found() -> list[Leftover]:
            roots = (f"{self.workdir}/",)
            return [left for left in scan(self.token, roots=roots) if left.pid not in ancestors]

        deadline = time.monotonic() + settle
        left = found()
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = found()
        for survivor in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(survivor.pid, signal.SIGKILL)
        return left


def slurm_name(node: dict[str, Any]) -> str | None:
    return (node["metadata"].get("labels") or {}).get(SLURM_NODE_LABEL)


def is_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def fenced(node: dict[str, Any]) -> bool:
    """Kept from new work: cordoned, or carrying our quarantine taint."""
    taints = {t.get("key") for t in node["spec"].get("taints") or []}
    return bool(node["spec"].get("unschedulable")) or QUARANTINE_TAINT in taints


def fence_items(body: Any) -> list[dict[str, Any]] | None:
    """`GET /api/v1/fences`: `{"items": [...]}` (a bare list before the owner's views gained an
    `error`; both are in this tree while that lands)."""
    if body is None:
        return None
    items: list[dict[str, Any]] = body["items"] if isinstance(body, dict) else body
    return items
