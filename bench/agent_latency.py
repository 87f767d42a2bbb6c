"""Node agent: fault written → remediation created, through the agents and, in the same run,
through the Prometheus pull path; then the agent's own CPU and memory, idle and under a
1,000-line/s kernel-log flood. Targets: median under 1 s; under 1% of a core idle; under 50 MB
resident.

Method: one `remediator sim serve --node-root DIR` subprocess (68 nodes); a real Prometheus
scraping the simulator's DCGM endpoint every 2 s; the real controller in-process (SQLite, leader
election off, the Prometheus source polled every 2 s, the console and push API on a loopback
port); one `remediator agent` subprocess for each of the first 56 nodes (its host directory, its
expected GPUs read from its Node on the simulated API server, a push-only token). Each sample
injects XID 79 on a fresh node through the simulator's inject API — the simulator appends the
driver's `NVRM: Xid` line to that node's kernel log — and stops the clock when the controller
opens the remediation (its `opened` metric hook). Agent samples use nodes with an agent; the
Prometheus samples use the 12 nodes without one, so only the pull path can see those faults.
Policy: XID 79 → cordon; budgets at 100%, breaker off.

Footprint: /proc/PID/stat (user+system ticks) and /proc/PID/status (VmRSS, VmHWM) of the agent
processes: the 56 agents over 30 s of quiet, and one more agent on a host directory that a
writer floods with 1,000 kernel-log records a second for 30 s (one in a thousand an XID line).

Usage: python -m bench.agent_latency [--agents 56] [--faults 52] [--prom-faults 12]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import SecretStr

from remediator.controller.app import Controller
from remediator.settings import LeaderElectionSettings, ProviderSettings, Settings, WebSettings
from remediator.sim.launch import AGENT_ACCOUNT, SimHandle, start_sim
from remediator.sim.node import driver
from remediator.sim.node.hosts import BOOT_ID, KMSG
from remediator.sim.node.kernel_log import KernelLog, xid_line
from remediator.sim.telemetry.exporters import gpu_uuid, pci_bus_id
from remediator.store.db import upgrade
from remediator.store.records import RemediationRecord
from tests.fixtures.prometheus import PrometheusHandle, scrape_config

PUSH_TOKEN = "bench-push-token"
WARMUP = 4
POLICY = """
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: Fence the node at once.
    match: {kind: xid, codes: [79]}
    priority: 100
    actions: [{action: cordon}]
"""
SETTINGS = """
max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}
max_concurrent: 100000
storm_breaker: {enabled: false}
"""
TICK = os.sysconf("SC_CLK_TCK")
FLOOD_RATE, FLOOD_SECONDS, IDLE_SECONDS = 1000, 30.0, 30.0
FLOOD_LINES = (
    'audit: type=1400 audit({t}:{n}): apparmor="STATUS" operation="profile_load"',
    "eth0: renamed from veth{n:x}",
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali{n:x}: link becomes ready",
    "EXT4-fs (nvme0n1p{p}): mounted filesystem with ordered data mode",
    "NVRM: GPU0 nvAssertFailedNoLog: Assertion failed: 0 @ g_kern_bus_nvoc.h:{n}",
)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Opened:
    """Wraps the controller's `opened` hook: when each node's remediation was created."""

    def __init__(self, chained: object) -> None:
        self._chained = chained
        self.at: dict[str, float] = {}
        self.records: dict[str, RemediationRecord] = {}
        self._cond = threading.Condition()

    def __call__(self, records: Iterable[RemediationRecord]) -> None:
        now = time.perf_counter()
        listed = list(records)
        with self._cond:
            for record in listed:
                self.at.setdefault(record.node, now)
                self.records.setdefault(record.node, record)
            self._cond.notify_all()
        self._chained(listed)  # type: ignore[operator]

    def wait(self, node: str, timeout: float) -> float:
        with self._cond:
            if not self._cond.wait_for(lambda: node in self.at, timeout):
                raise SystemExit(f"no remediation for {node} within {timeout:.0f} s")
            return self.at[node]


@dataclass
class Usage:
    cpu_seconds: float
    rss_mb: float
    hwm_mb: float


def usage(pid: int) -> Usage:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    kb = lambda key: int(status[key].split()[0]) / 1024  # noqa: E731
    return Usage(ticks / TICK, kb("VmRSS"), kb("VmHWM"))


def agent_command(node: str, host: Path, url: str, state: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "remediator",
        "agent",
        "--node",
        node,
        "--controller-url",
        url,
        "--state-dir",
        str(state),
        "--host-root",
        str(host),
        "--kmsg",
        str(host / KMSG),
        *extra,
    ]


def kube_access(sim: SimHandle, workdir: Path) -> list[str]:
    """The agents read their Nodes as the agent's ServiceAccount, over the simulator's TLS."""
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


def start_agents(
    sim: SimHandle, nodes: Sequence[str], url: str, workdir: Path
) -> list[subprocess.Popen[bytes]]:
    assert sim.node_root is not None
    env = {**os.environ, "REMEDIATOR_AGENT_TOKEN": PUSH_TOKEN}
    procs = []
    for node in nodes:
        command = agent_command(
            node, sim.node_root / node, url, workdir / "agents" / node, *kube_access(sim, workdir)
        )
        with (workdir / f"agent-{node}.log").open("ab") as log:
            procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
    return procs


def inject_xid(inject: httpx.Client, node: str, gpu: int) -> None:
    answer = inject.post("/v1/faults", json={"type": "xid", "node": node, "gpu": gpu, "code": 79})
    if answer.status_code != 200:
        raise SystemExit(f"inject refused: {answer.status_code} {answer.text}")


def sample(
    inject: httpx.Client, opened: Opened, nodes: Sequence[str], timeout: float, rng: random.Random
) -> list[float]:
    took = []
    for node in nodes:
        time.sleep(rng.uniform(0.0, 0.3))  # off any poll or scrape phase
        started = time.perf_counter()
        inject_xid(inject, node, rng.randrange(8))
        took.append(opened.wait(node, timeout) - started)
    return took


def flood_host(root: Path) -> KernelLog:
    (root / BOOT_ID).parent.mkdir(parents=True, exist_ok=True)
    (root / BOOT_ID).write_text("0b5e1d2c-0000-4000-8000-00000000f100\n")
    for index in range(8):
        uuid = gpu_uuid("flood-node", index)
        driver.attach(root, "NVIDIA H100 80GB HBM3", uuid, pci_bus_id(index), index)
    return KernelLog(root / KMSG)


def flood(log: KernelLog, rate: int, seconds: float) -> int:
    """`rate` records a second for `seconds`, in 20 ms batches; returns how many."""
    written, started, batch = 0, time.monotonic(), rate // 50
    while time.monotonic() - started < seconds:
        for _ in range(batch):
            if written % 1000 == 999:
                line = xid_line(pci_bus_id(written % 8), 79, "GPU has fallen off the bus", None, "")
            else:
                template = FLOOD_LINES[written % len(FLOOD_LINES)]
                line = template.format(t=int(time.time()), n=written, p=written % 4 + 1)
            log.write(line)
            written += 1
        time.sleep(max(0.0, (written / rate) - (time.monotonic() - started)))
    return written


def read_all(controller: Controller, node: str, written: int, timeout: float = 30.0) -> int:
    """How many records the agent says it read (its heartbeat's count), once that reaches
    `written` or `timeout` passed: whether it kept up with the flood."""
    deadline = time.monotonic() + timeout
    while True:
        status = controller.heartbeats.status(node)
        read = int(status.stats.get("records_read", 0)) if status else 0
        if read >= written or time.monotonic() > deadline:
            return read
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=56)
    parser.add_argument("--faults", type=int, default=52)
    parser.add_argument("--prom-faults", type=int, default=12)
    args = parser.parse_args()
    if args.agents < max(16, args.faults + WARMUP):
        raise SystemExit("--agents must be at least 16 and cover --faults plus the warm-up")
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        workdir = Path(tmp)
        fleet = args.agents + args.prom_faults
        sim = start_sim(workdir, nodes=fleet, node_root=workdir / "nodes", ready_timeout=300)
        prometheus = PrometheusHandle(
            workdir, scrape_config([sim.metrics_url + "/metrics"], "2s", "dcgm")
        )
        try:
            prometheus.start()
            return run(workdir, sim, prometheus, args)
        finally:
            prometheus.stop()
            sim.stop()


def run(
    workdir: Path, sim: SimHandle, prometheus: PrometheusHandle, args: argparse.Namespace
) -> int:
    policies = workdir / "policies"
    policies.mkdir()
    (policies / "xid.yaml").write_text(POLICY)
    (policies / "settings.yaml").write_text(SETTINGS)
    database = f"sqlite:///{workdir / 'remediator.db'}"
    upgrade(database)
    settings = Settings(
        kubeconfig=sim.kubeconfig,
        prometheus_url=prometheus.url,
        policies_dir=policies,
        database_url=database,
        provider=ProviderSettings(url=sim.nodepool_url),
        web=WebSettings(listen="127.0.0.1:0", push_tokens=[SecretStr(PUSH_TOKEN)]),
        leader_election=LeaderElectionSettings(enabled=False),
        poll_interval_seconds=2.0,
        advance_interval_seconds=1.0,
        agent_silent_after_seconds=60.0,
    )
    controller = Controller(settings)
    opened = Opened(controller.metrics.opened)
    controller.metrics.opened = opened  # type: ignore[method-assign]
    controller.start()
    names = sorted(n.name for n in controller.kube.list_nodes())
    agent_nodes, prom_nodes = names[: args.agents], names[args.agents :]
    url = str(controller.web_url)
    agents = start_agents(sim, agent_nodes, url, workdir)
    inject = httpx.Client(base_url=sim.inject_url, timeout=30.0)
    rng = random.Random(20261201)
    flood_proc: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 180
        while len(controller.heartbeats.statuses()) < len(agent_nodes):
            if time.monotonic() > deadline:
                raise SystemExit("not every agent sent a heartbeat within 180 s")
            time.sleep(0.2)
        prometheus.wait_for("DCGM_FI_DEV_GPU_TEMP", timeout=120)

        via_agent = sample(inject, opened, agent_nodes[: WARMUP + args.faults], 30, rng)
        via_agent = via_agent[WARMUP:]
        sources = {
            opened.records[n].signals[0].source if opened.records[n].signals else "?"
            for n in agent_nodes[WARMUP : WARMUP + args.faults]
        }
        via_prom = sample(inject, opened, prom_nodes[: args.prom_faults], 90, rng)

        pids = [p.pid for p in agents]
        before = [usage(pid) for pid in pids]
        time.sleep(IDLE_SECONDS)
        after = [usage(pid) for pid in pids]
        idle_cpu = [
            (a.cpu_seconds - b.cpu_seconds) / IDLE_SECONDS * 100
            for a, b in zip(after, before, strict=True)
        ]
        idle_rss = [a.rss_mb for a in after]

        log = flood_host(workdir / "flood-host")
        env = {**os.environ, "REMEDIATOR_AGENT_TOKEN": PUSH_TOKEN}
        command = agent_command(
            "flood-node",
            workdir / "flood-host",
            url,
            workdir / "flood-state",
            "--expected-gpus",
            "8",
        )
        with (workdir / "agent-flood.log").open("ab") as out:
            flood_proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        time.sleep(3.0)  # started and idle
        start = usage(flood_proc.pid)
        written = flood(log, FLOOD_RATE, FLOOD_SECONDS)
        end = usage(flood_proc.pid)
        flood_cpu = (end.cpu_seconds - start.cpu_seconds) / FLOOD_SECONDS * 100
        kept_up = read_all(controller, "flood-node", written)
    finally:
        for proc in [*agents, *([flood_proc] if flood_proc else [])]:
            proc.terminate()
        for proc in [*agents, *([flood_proc] if flood_proc else [])]:
            proc.wait(timeout=30)
        inject.close()
        controller.stop()

    ms = lambda v: f"{v * 1000:.0f}"  # noqa: E731
    print(
        f"{len(names)}-node simulated fleet, {len(agent_nodes)} agents (one per node), "
        f"Prometheus scrape 2 s, controller poll 2 s"
    )
    print(f"agent-path remediations opened from signals of source: {', '.join(sorted(sources))}")
    print()
    print("| path | faults | median ms | p90 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, values in (("Prometheus pull", via_prom), ("node agent push", via_agent)):
        print(
            f"| {label} | {len(values)} | {ms(statistics.median(values))} | "
            f"{ms(percentile(values, 0.9))} | {ms(percentile(values, 0.99))} | {ms(max(values))} |"
        )
    print()
    print("| agent | CPU % of one core | RSS MB | peak RSS MB | records read |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(
        f"| idle ({len(pids)} agents, {IDLE_SECONDS:.0f} s): mean / max | "
        f"{statistics.mean(idle_cpu):.2f} / {max(idle_cpu):.2f} | "
        f"{statistics.mean(idle_rss):.1f} / {max(idle_rss):.1f} | "
        f"{max(a.hwm_mb for a in after):.1f} | |"
    )
    print(
        f"| flood ({written / FLOOD_SECONDS:.0f} lines/s for {FLOOD_SECONDS:.0f} s) | "
        f"{flood_cpu:.2f} | {end.rss_mb:.1f} | {end.hwm_mb:.1f} | {kept_up} of {written} |"
    )
    median = statistics.median(via_agent)
    print()
    print(
        f"targets: median < 1 s {'met' if median < 1 else 'MISSED'}; idle CPU < 1% "
        f"{'met' if max(idle_cpu) < 1 else 'MISSED'}; RSS < 50 MB "
        f"{'met' if max(end.hwm_mb, *idle_rss) < 50 else 'MISSED'}"
    )
    p99 = percentile(via_agent, 0.99)
    print(f"agent: fault → remediation median {ms(median)} ms p99 {ms(p99)} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
