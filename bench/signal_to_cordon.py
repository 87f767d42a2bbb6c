"""Signal to cordon: how long from a pushed signal to the node fenced, on a 2,000-node simulated
fleet, against the bare cordon PATCH round trip in the same run. Targets: median under 100 ms,
p99 under 500 ms.

Method: one `remediator sim serve --nodes 2000` subprocess; the real controller in-process
(SQLite in a temp dir, leader election off, its APScheduler jobs running, the console served on
a loopback port). Each sample POSTs one XID 79 signal for a fresh node to the console's push
endpoint (bearer token, keep-alive connection) and stops the clock when the engine commits the
transition out of `quarantined`, i.e. after the quarantine action has annotated, cordoned and
tainted the node and written its Event, and the intake before it has folded, stored, evaluated,
budgeted and opened the remediation. The policy's ladder is just `cordon`, so each remediation
then rests in `held` and the next sample starts from a quiet engine. The baseline is
`KubeClient.cordon` (one strategic-merge PATCH) on other nodes, alternating with the samples.

Usage: python -m bench.signal_to_cordon [--samples N] [--nodes N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pydantic import SecretStr

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.remediation.service import TransitionSeen
from remediator.settings import (
    LeaderElectionSettings,
    ProviderSettings,
    Settings,
    WebSettings,
)
from remediator.sim.launch import SimHandle, start_sim
from remediator.store.db import upgrade

TOKEN = "bench-token"
POLICY = """
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: Fence the node at once.
    match:
      kind: xid
      codes: [79]
    priority: 100
    actions:
      - action: cordon
"""
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 100000
storm_breaker: {enabled: false}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Stopwatch:
    """Stops at the commit of the transition out of `quarantined` for the awaited node."""

    def __init__(self) -> None:
        self.node: str | None = None
        self.stopped_at = 0.0
        self.done = threading.Event()

    def start(self, node: str) -> None:
        self.node = node
        self.done.clear()

    def __call__(self, seen: TransitionSeen) -> None:
        if seen.before.state is State.QUARANTINED and seen.before.node == self.node:
            self.stopped_at = time.perf_counter()
            self.done.set()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-cordon-") as tmp:
        workdir = Path(tmp)
        sim = start_sim(workdir, nodes=args.nodes, ready_timeout=300)
        try:
            return run(workdir, sim, args.samples, args.nodes)
        finally:
            sim.stop()


def run(workdir: Path, sim: SimHandle, samples: int, fleet: int) -> int:
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
        web=WebSettings(listen="127.0.0.1:0", operator_tokens=[SecretStr(TOKEN)]),
        leader_election=LeaderElectionSettings(enabled=False),
        poll_interval_seconds=60.0,
        advance_interval_seconds=1.0,
    )
    controller = Controller(settings, sources=[])
    watch = Stopwatch()
    chained = controller.service.on_transition

    def observe(seen: TransitionSeen) -> None:
        chained(seen)
        watch(seen)

    controller.service.on_transition = observe
    controller.start()
    names = [n.name for n in controller.kube.list_nodes()]
    assert len(names) == fleet, f"expected {fleet} nodes, found {len(names)}"
    targets, baseline_nodes = names[: samples + 5], names[samples + 5 : 2 * samples + 10]
    push = httpx.Client(
        base_url=str(controller.web_url),
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30.0,
    )
    to_cordon: list[float] = []
    patch: list[float] = []
    try:
        controller.refresh_inventory()
        for index, (node, other) in enumerate(zip(targets, baseline_nodes, strict=True)):
            signal = {
                "node": node,
                "kind": "xid",
                "source": "bench",
                "observed_at": datetime.now(UTC).isoformat(),
                "gpu": 0,
                "code": 79,
            }
            watch.start(node)
            started = time.perf_counter()
            response = push.post("/api/v1/signals", json=[signal])
            if response.status_code != 202:
                raise SystemExit(f"push refused: {response.status_code} {response.text}")
            if not watch.done.wait(30):
                raise SystemExit(f"{node} was not cordoned within 30 s")
            elapsed = watch.stopped_at - started
            began = time.perf_counter()
            controller.kube.cordon(other)
            bare = time.perf_counter() - began
            if index >= 5:  # warm-up: first connections, first queries
                to_cordon.append(elapsed)
                patch.append(bare)
            if not controller.kube.get_node(node).unschedulable:
                raise SystemExit(f"{node} is not cordoned")
    finally:
        push.close()
        controller.stop()

    rows = [("bare cordon PATCH round trip", patch), ("pushed signal → node cordoned", to_cordon)]
    base = statistics.median(patch)
    print(f"{fleet}-node simulated fleet, {len(to_cordon)} samples (after 5 warm-up)")
    print()
    print("| case | median ms | p90 ms | p99 ms | ratio to bare PATCH (median) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, values in rows:
        median = statistics.median(values)
        print(
            f"| {name} | {median * 1000:.1f} | {percentile(values, 0.9) * 1000:.1f} | "
            f"{percentile(values, 0.99) * 1000:.1f} | {median / base:.1f} |"
        )
    median_ok = statistics.median(to_cordon) < 0.100
    p99_ok = percentile(to_cordon, 0.99) < 0.500
    print()
    print(f"target median < 100 ms: {'met' if median_ok else 'MISSED'}; ", end="")
    print(f"p99 < 500 ms: {'met' if p99_ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
