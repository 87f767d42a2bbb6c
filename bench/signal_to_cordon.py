"""Signal to cordon: how long from a pushed signal to the node fenced, on a 2,000-node simulated
fleet, against the bare cordon PATCH round trip in the same run; and in a storm, how many nodes
the controller fences per second under its Kubernetes API rate limit. Targets: median under
100 ms, p99 under 500 ms.

Method: one `remediator sim serve --nodes 2000` subprocess; the real controller in-process
(SQLite in a temp dir, leader election off, its APScheduler jobs running, the console served on
a loopback port). Each sample POSTs one XID 79 signal for a fresh node to the console's push
endpoint (bearer token, keep-alive connection) and stops the clock when the engine commits the
transition out of `quarantined`, i.e. after the quarantine action has annotated, cordoned and
tainted the node and written its Event, and the intake before it has folded, stored, evaluated,
budgeted and opened the remediation. The policy's ladder is just `cordon`, so each remediation
then rests in `held` and the next sample starts from a quiet engine. The baseline is
`KubeClient.cordon` (one strategic-merge PATCH) on other nodes, alternating with the samples.

The client's token bucket (`kube_api.qps`/`burst`) is shared by every request: samples sent
back to back would drain it and measure its waits, not the pipeline. So each sample starts with
the bucket full (the bench waits for it), and the time requests spent waiting for a token during
the samples is reported apart (it should be zero).

The storm: STORM fresh nodes' XID 79s pushed at once (batches of 100), timed until the last is
cordoned; nodes fenced per second, and the limiter's total wait, under each `qps/burst` named
(the shipped default first). The budgets and the breaker are opened up here: the storm measures
how fast the controller can fence, not how many it should.

Usage: python -m bench signal_to_cordon [--samples N] [--nodes N] [--storm N]
       [--limits QPS/BURST,…]
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
    KubeApiSettings,
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


class StormWatch:
    """Stops when every awaited node has left `quarantined`."""

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.stopped_at = 0.0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def start(self, nodes: list[str]) -> None:
        with self._lock:
            self.pending = set(nodes)
            self.done.clear()

    def __call__(self, seen: TransitionSeen) -> None:
        if seen.before.state is not State.QUARANTINED:
            return
        with self._lock:
            if seen.before.node in self.pending:
                self.pending.discard(seen.before.node)
                if not self.pending:
                    self.stopped_at = time.perf_counter()
                    self.done.set()


def limits(text: str) -> list[tuple[float, int]]:
    found = []
    for part in text.split(","):
        qps, burst = part.split("/")
        found.append((float(qps), int(burst)))
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--storm", type=int, default=200, help="nodes faulted at once")
    default = KubeApiSettings()
    parser.add_argument(
        "--limits",
        default=f"{default.qps:g}/{default.burst},20/30,100/200",
        help="kube_api qps/burst pairs to run the storm under (default: the shipped one first)",
    )
    args = parser.parse_args()
    pairs = list(dict.fromkeys(limits(args.limits)))
    needed = 2 * args.samples + 10 + len(pairs) * args.storm
    if needed > args.nodes:
        raise SystemExit(f"{needed} nodes needed for the samples and storms; --nodes {args.nodes}")

    with tempfile.TemporaryDirectory(prefix="bench-cordon-") as tmp:
        workdir = Path(tmp)
        sim = start_sim(workdir, nodes=args.nodes, ready_timeout=300)
        try:
            return run(workdir, sim, args.samples, args.nodes, args.storm, pairs)
        finally:
            sim.stop()


def make_controller(
    workdir: Path, sim: SimHandle, qps: float, burst: int, name: str
) -> tuple[Controller, Stopwatch, StormWatch]:
    policies = workdir / "policies"
    if not policies.exists():
        policies.mkdir()
        (policies / "xid.yaml").write_text(POLICY)
        (policies / "settings.yaml").write_text(SETTINGS)
    database = f"sqlite:///{workdir / f'{name}.db'}"
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
        kube_api=KubeApiSettings(qps=qps, burst=burst),
    )
    controller = Controller(settings, sources=[])
    watch = Stopwatch()
    storm = StormWatch()
    chained = controller.service.on_transition

    def observe(seen: TransitionSeen) -> None:
        chained(seen)
        watch(seen)
        storm(seen)

    controller.service.on_transition = observe
    controller.start()
    controller.refresh_inventory()
    return controller, watch, storm


def xid(node: str) -> dict[str, object]:
    return {
        "node": node,
        "kind": "xid",
        "source": "bench",
        "observed_at": datetime.now(UTC).isoformat(),
        "gpu": 0,
        "code": 79,
    }


def latency(
    controller: Controller, watch: Stopwatch, push: httpx.Client, pairs: list[tuple[str, str]]
) -> tuple[list[float], list[float], float, float]:
    """Signal → cordon and the bare PATCH, each sample from a full token bucket; returns the
    samples, the limiter's waits during them, and the time spent letting the bucket refill."""
    limiter = controller.kube_limiter
    to_cordon: list[float] = []
    patch: list[float] = []
    waited = refilling = 0.0
    for index, (node, other) in enumerate(pairs):
        pause = limiter.full_in()
        refilling += pause
        time.sleep(pause)
        before = limiter.waited_seconds
        watch.start(node)
        started = time.perf_counter()
        response = push.post("/api/v1/signals", json=[xid(node)])
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
            waited += limiter.waited_seconds - before
        if not controller.kube.get_node(node).unschedulable:
            raise SystemExit(f"{node} is not cordoned")
    return to_cordon, patch, waited, refilling


def storm(
    controller: Controller, watch: StormWatch, push: httpx.Client, nodes: list[str]
) -> tuple[float, float]:
    """All nodes' XID 79s at once; seconds until the last is cordoned, and the limiter's wait."""
    limiter = controller.kube_limiter
    time.sleep(limiter.full_in())
    before = limiter.waited_seconds
    watch.start(nodes)
    started = time.perf_counter()
    for first in range(0, len(nodes), 100):
        response = push.post("/api/v1/signals", json=[xid(n) for n in nodes[first : first + 100]])
        if response.status_code != 202:
            raise SystemExit(f"push refused: {response.status_code} {response.text}")
    if not watch.done.wait(600):
        raise SystemExit(f"{len(watch.pending)} of {len(nodes)} not cordoned within 600 s")
    elapsed = watch.stopped_at - started
    if any(not controller.kube.get_node(n).unschedulable for n in nodes):
        raise SystemExit("a storm node is not cordoned")
    return elapsed, limiter.waited_seconds - before


def client_for(controller: Controller) -> httpx.Client:
    return httpx.Client(
        base_url=str(controller.web_url),
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=60.0,
    )


def run(
    workdir: Path,
    sim: SimHandle,
    samples: int,
    fleet: int,
    storm_size: int,
    pairs: list[tuple[float, int]],
) -> int:
    qps, burst = pairs[0]
    controller, watch, storm_watch = make_controller(workdir, sim, qps, burst, "first")
    names = [n.name for n in controller.kube.list_nodes()]
    assert len(names) == fleet, f"expected {fleet} nodes, found {len(names)}"
    targets, baseline_nodes = names[: samples + 5], names[samples + 5 : 2 * samples + 10]
    rest = names[2 * samples + 10 :]
    storms: list[tuple[float, int, float, float]] = []
    push = client_for(controller)
    try:
        to_cordon, patch, waited, refilling = latency(
            controller, watch, push, list(zip(targets, baseline_nodes, strict=True))
        )
        elapsed, storm_wait = storm(controller, storm_watch, push, rest[:storm_size])
        storms.append((qps, burst, elapsed, storm_wait))
    finally:
        push.close()
        controller.stop()
    for number, (qps, burst) in enumerate(pairs[1:], start=1):
        controller, _, storm_watch = make_controller(workdir, sim, qps, burst, f"storm{number}")
        push = client_for(controller)
        try:
            chunk = rest[number * storm_size : (number + 1) * storm_size]
            elapsed, storm_wait = storm(controller, storm_watch, push, chunk)
            storms.append((qps, burst, elapsed, storm_wait))
        finally:
            push.close()
            controller.stop()

    rows = [("bare cordon PATCH round trip", patch), ("pushed signal → node cordoned", to_cordon)]
    base = statistics.median(patch)
    print(
        f"{fleet}-node simulated fleet, {len(to_cordon)} samples (after 5 warm-up), each from a "
        f"full token bucket ({pairs[0][0]:g} qps, burst {pairs[0][1]}; "
        f"{refilling:.1f} s spent letting it refill)"
    )
    print()
    print("| case | median ms | p90 ms | p99 ms | ratio to bare PATCH (median) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, values in rows:
        median = statistics.median(values)
        print(
            f"| {name} | {median * 1000:.1f} | {percentile(values, 0.9) * 1000:.1f} | "
            f"{percentile(values, 0.99) * 1000:.1f} | {median / base:.1f} |"
        )
    print()
    print(f"rate-limiter waits during the samples: {waited * 1000:.1f} ms in all")
    print()
    print(f"storm: {storm_size} nodes' XID 79 pushed at once, budgets and breaker opened")
    print()
    print("| kube_api qps/burst | last node cordoned s | nodes fenced per s | limiter wait s |")
    print("| --- | ---: | ---: | ---: |")
    for qps, burst, elapsed, storm_wait in storms:
        print(
            f"| {qps:g}/{burst} | {elapsed:.2f} | {storm_size / elapsed:.1f} | {storm_wait:.2f} |"
        )
    median_ok = statistics.median(to_cordon) < 0.100
    p99_ok = percentile(to_cordon, 0.99) < 0.500
    print()
    print(
        f"storm under the default {storms[0][0]:g}/{storms[0][1]}: "
        f"{storm_size / storms[0][2]:.1f} nodes fenced per s"
    )
    print(f"target median < 100 ms: {'met' if median_ok else 'MISSED'}; ", end="")
    print(f"p99 < 500 ms: {'met' if p99_ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
