"""How the simulated Kubernetes API scales: `remediator sim serve` at a small and a large fleet,
timing start-up until the ready file appears, stock `kubectl get nodes` / `kubectl get pods -A`,
and the same lists fetched directly (500 per page, as kubectl chunks) to separate the server's
share from kubectl's own client-side rate limit. Medians; the ratio column compares the two
fleet sizes within this one run.

Usage: python -m bench.sim_api_scale [--nodes 2000] [--baseline 4] [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from remediator.sim.launch import SimHandle, start_sim

TARGETS = {"ready (s)": 30.0, "kubectl get nodes (s)": 2.0}


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def chunked_list(http: httpx.Client, path: str) -> int:
    """Every page of a list at kubectl's chunk size; returns the item count."""
    count, token = 0, ""
    while True:
        params = {"limit": "500", **({"continue": token} if token else {})}
        page = http.get(path, params=params).json()
        count += len(page["items"])
        token = page["metadata"].get("continue", "")
        if not token:
            return count


def measure(workdir: Path, nodes: int, runs: int) -> tuple[dict[str, float], dict[str, int]]:
    start = time.perf_counter()
    handle: SimHandle = start_sim(workdir, nodes=nodes)
    ready = time.perf_counter() - start
    http = handle.kube_http(timeout=60)
    try:
        handle.kubectl("get", "nodes")  # warm kubectl's discovery cache, as a user's would be
        samples: dict[str, list[float]] = {
            "kubectl get nodes (s)": [],
            "kubectl get pods -A (s)": [],
            "list nodes, server only (s)": [],
            "list pods, server only (s)": [],
        }
        sizes: dict[str, int] = {}
        for _ in range(runs):
            samples["kubectl get nodes (s)"].append(timed(lambda: handle.kubectl("get", "nodes")))
            samples["kubectl get pods -A (s)"].append(
                timed(lambda: handle.kubectl("get", "pods", "-A"))
            )
            for kind in ("nodes", "pods"):
                began = time.perf_counter()
                sizes[kind] = chunked_list(http, f"/api/v1/{kind}")
                samples[f"list {kind}, server only (s)"].append(time.perf_counter() - began)
        medians = {"ready (s)": ready}
        medians.update({name: statistics.median(values) for name, values in samples.items()})
        return medians, sizes
    finally:
        http.close()
        handle.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.sim_api_scale")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--baseline", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if shutil.which("kubectl") is None:
        print("kubectl is not installed", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        small, small_sizes = measure(Path(tmp) / "small", args.baseline, args.runs)
        large, large_sizes = measure(Path(tmp) / "large", args.nodes, args.runs)
    print(
        f"fleet sizes: {small_sizes['nodes']} nodes / {small_sizes['pods']} pods vs "
        f"{large_sizes['nodes']} nodes / {large_sizes['pods']} pods; median of {args.runs}"
    )
    header = f"{'metric':<30} {args.baseline:>9} {args.nodes:>9} {'ratio':>7} {'target':>8}"
    print(header)
    print("-" * len(header))
    failed = False
    for name, big in large.items():
        target = TARGETS.get(name)
        verdict = ""
        if target is not None:
            verdict = f"<{target:g} ok" if big < target else f"<{target:g} MISS"
            failed = failed or big >= target
        ratio = big / small[name] if small[name] else float("inf")
        print(f"{name:<30} {small[name]:>9.3f} {big:>9.3f} {ratio:>6.1f}x {verdict:>8}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
