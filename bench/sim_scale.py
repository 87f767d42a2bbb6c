"""SimCluster at fleet scale: how long seeding takes, and what a tick costs when nothing happens
and when one thing does (an eviction, a gang member lost), at growing cluster sizes.

A tick should cost what changed, not what exists: the ratio columns compare each size with the
smallest one within the same run (the machines are shared, so absolute times are noisy).

Usage: python -m bench.sim_scale [SIZE ...]   (default 250 1000 2000 nodes)
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from remediator.clock import FakeClock
from remediator.sim import fleet
from remediator.sim.kube.api.kobj import GANG_LABEL, is_terminating
from remediator.sim.kube.controllers.cluster import SimCluster

QUIET_SECONDS = 10  # of simulated time, ticked every 0.1 s as the live server does
DISRUPTIONS = 15


def _timed(action: Callable[[], None]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _settle(cluster: SimCluster, clock: FakeClock, seconds: float) -> None:
    for _ in range(int(seconds / 0.5)):
        clock.advance(0.5)
        cluster.tick()


def measure(nodes: int) -> dict[str, float]:
    clock = FakeClock()
    cluster = SimCluster(clock)
    cpu = time.process_time()
    seed_wall = _timed(lambda: cluster.seed(fleet.plan(nodes)))
    seed_cpu = time.process_time() - cpu
    pods = len(cluster.store.list("pods")[0])

    quiet = []  # tick time per simulated second: only kubelet heartbeats fall due
    for _ in range(QUIET_SECONDS):
        spent = 0.0
        for _ in range(10):
            clock.advance(0.1)
            spent += _timed(cluster.tick)
        quiet.append(spent)

    inference = sorted(
        (p for p in cluster.store.list("pods", "inference")[0]),
        key=lambda p: p["metadata"]["name"],
    )
    evictions = []
    for pod in inference[:DISRUPTIONS]:
        cluster.evict("inference", pod["metadata"]["name"], grace_period_seconds=5)
        evictions.append(_timed(cluster.tick))  # RS replacement, scheduling, PDB status
        _settle(cluster, clock, 10)

    gangs = []
    for job in sorted(cluster.store.list("batch/jobs")[0], key=lambda j: j["metadata"]["name"])[
        :DISRUPTIONS
    ]:
        members = [
            p
            for p in cluster.store.list("pods", "training")[0]
            if p["metadata"]["labels"].get(GANG_LABEL) == job["metadata"]["name"]
            and not is_terminating(p)
        ]
        if not members:
            continue
        cluster.delete_pod("training", members[0]["metadata"]["name"], grace_period_seconds=0)
        gangs.append(_timed(cluster.tick))  # requeue: delete all, recreate, try to place
        _settle(cluster, clock, 10)

    return {
        "nodes": nodes,
        "pods": pods,
        "seed_wall": seed_wall,
        "seed_cpu": seed_cpu,
        "quiet": statistics.median(quiet),
        "evict": statistics.median(evictions),
        "gang": statistics.median(gangs) if gangs else float("nan"),
    }


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [250, 1000, 2000]
    rows = [measure(n) for n in sizes]
    base = rows[0]
    print(
        f"{'nodes':>6} {'pods':>6} {'seed s':>7} {'seed cpu':>8} {'quiet ms/s':>13} "
        f"{'evict tick ms':>13} {'gang tick ms':>12} {'x seed':>7} {'x quiet':>7} "
        f"{'x evict':>7} {'x gang':>7}"
    )
    for row in rows:
        print(
            f"{row['nodes']:>6.0f} {row['pods']:>6.0f} {row['seed_wall']:>7.2f} "
            f"{row['seed_cpu']:>8.2f} {row['quiet'] * 1e3:>13.3f} {row['evict'] * 1e3:>13.2f} "
            f"{row['gang'] * 1e3:>12.2f} {row['seed_cpu'] / base['seed_cpu']:>7.1f} "
            f"{row['quiet'] / base['quiet']:>7.1f} {row['evict'] / base['evict']:>7.1f} "
            f"{row['gang'] / base['gang']:>7.1f}"
        )
    print(
        f"(medians: {QUIET_SECONDS} quiet simulated seconds, {DISRUPTIONS} evictions and gang "
        "losses per size; seed s is wall time, seed cpu process time)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
