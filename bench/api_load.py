"""API load: how many Kubernetes API requests the controller makes per remediation and per idle
minute, on a 2,000-node simulated fleet. Target: an idle fleet well under one request a second.

Method: one `remediator sim serve --nodes 2000` subprocess, whose inject API logs every request
the simulated apiserver receives with its User-Agent; the real controller in-process with its
production defaults (leader election on, lease 15 s / renew deadline 10 s / retry 2 s, poll every
15 s with the node-condition source, advance every 2 s, reconcile every 10 s, QPS 20 / burst 30),
SQLite in a temp dir. Only requests whose User-Agent names the controller's identity count (not
the bench's own reads). Idle: the requests of one quiet minute after a 20 s settle. Per
remediation: XID 79 pushed for a training node, the policy ladder cordon → checkpoint (1 s) →
drain (1 s) → replace, from the push to `succeeded`; the requests in that window less the idle
rate over the same window, averaged over the remediations run one after another.

Usage: python -m bench.api_load [--nodes N] [--remediations N] [--idle-seconds S]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.remediation.service import TransitionSeen
from remediator.settings import LeaderElectionSettings, ProviderSettings, Settings, WebSettings
from remediator.signals.model import Signal, SignalKind
from remediator.sim.launch import SimHandle, start_sim
from remediator.store.db import upgrade

IDENTITY = "api-load-bench"
POLICY = """
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: Replace the node.
    match:
      kind: xid
      codes: [79]
    priority: 100
    actions:
      - action: cordon
      - action: checkpoint
        max_grace: 1s
      - action: drain
        timeout: 2m
        on_timeout: force
      - action: replace
"""
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 100
storm_breaker: {enabled: false}
"""


class Requests:
    """The simulator's request log, narrowed to the controller's own requests."""

    def __init__(self, inject_url: str) -> None:
        self.http = httpx.Client(base_url=inject_url, timeout=30.0)
        self.seq = 0

    def mark(self) -> None:
        self.seq = int(self.http.get("/v1/kube-requests").json()["total"])

    def since_mark(self) -> list[dict[str, Any]]:
        found = self.http.get("/v1/kube-requests", params={"since": self.seq}).json()
        return [r for r in found["requests"] if f"({IDENTITY})" in r["user_agent"]]


class Finished:
    def __init__(self) -> None:
        self.node: str | None = None
        self.done = threading.Event()

    def __call__(self, seen: TransitionSeen) -> None:
        if seen.after.node == self.node and seen.after.state in (
            State.SUCCEEDED,
            State.FAILED,
            State.HELD,
        ):
            self.done.set()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--remediations", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-api-load-") as tmp:
        workdir = Path(tmp)
        sim = start_sim(workdir, nodes=args.nodes, provision_delay=1.0, ready_timeout=300)
        try:
            return run(workdir, sim, args.nodes, args.remediations, args.idle_seconds)
        finally:
            sim.stop()


def table(title: str, counts: Counter[str], scale: float) -> None:
    print(f"| {title} | requests |")
    print("| --- | ---: |")
    for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"| {key} | {count * scale:.1f} |")
    print()


def run(workdir: Path, sim: SimHandle, fleet: int, remediations: int, idle: float) -> int:
    policies = workdir / "policies"
    policies.mkdir()
    (policies / "xid.yaml").write_text(POLICY)
    (policies / "settings.yaml").write_text(SETTINGS)
    database = f"sqlite:///{workdir / 'remediator.db'}"
    upgrade(database)
    settings = Settings(
        kubeconfig=workdir / "kubeconfig",
        policies_dir=policies,
        database_url=database,
        provider=ProviderSettings(url=sim.nodepool_url),
        web=WebSettings(listen="127.0.0.1:0"),
        leader_election=LeaderElectionSettings(identity=IDENTITY),
    )
    controller = Controller(settings)
    finished = Finished()
    chained = controller.service.on_transition

    def observe(seen: TransitionSeen) -> None:
        chained(seen)
        finished(seen)

    controller.service.on_transition = observe
    log = Requests(sim.inject_url)
    controller.start(serve_web=False)
    try:
        deadline = time.monotonic() + 60
        while not controller.is_leader():
            if time.monotonic() > deadline:
                raise SystemExit("the controller did not win the lease within 60 s")
            time.sleep(0.2)
        time.sleep(20.0)  # settle: first polls, policy record, inventory
        log.mark()
        time.sleep(idle)
        idle_requests = log.since_mark()
        idle_rate = len(idle_requests) / idle  # per second
        names = sorted(
            n.name for n in controller.kube.list_nodes() if n.name.startswith("h100-train-")
        )
        per: list[float] = []
        during: Counter[str] = Counter()
        for node in names[:remediations]:
            finished.node = node
            finished.done.clear()
            log.mark()
            began = time.monotonic()
            controller.inbox.put(
                [
                    Signal(
                        node=node,
                        kind=SignalKind.XID,
                        source="bench",
                        observed_at=datetime.now(UTC),
                        gpu=0,
                        code=79,
                    )
                ]
            )
            if not finished.done.wait(180):
                raise SystemExit(f"the remediation of {node} did not finish within 180 s")
            window = time.monotonic() - began
            seen = log.since_mark()
            during.update(f"{r['verb']} {r['resource']}" for r in seen)
            per.append(len(seen) - idle_rate * window)
    finally:
        controller.stop()

    idle_counts = Counter(f"{r['verb']} {r['resource']}" for r in idle_requests)
    per_minute = idle_rate * 60
    per_remediation = sum(per) / len(per)
    print(f"{fleet}-node simulated fleet; idle {idle:.0f} s; {len(per)} remediations")
    print()
    table("idle minute: verb resource", idle_counts, 60 / idle)
    table("per remediation (incl. idle traffic in its window): verb resource", during, 1 / len(per))
    print(f"idle: {per_minute / 60:.2f} requests/s; remediations: {[round(p) for p in per]}")
    print(f"target idle well under 1 request/s: {'met' if per_minute / 60 < 0.8 else 'MISSED'}")
    print(
        f"api requests: per remediation {per_remediation:.0f}, "
        f"per idle minute at {fleet} nodes {per_minute:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
