"""Drain speed: remediator's drain action against stock `kubectl drain`, on two identically
loaded simulated nodes in the same run. Target: ours takes no longer (ratio ≤ 1).

Method: one `remediator sim serve` with 6 nodes, its seeded workloads removed so that every node
carries only its DaemonSet pods. Each round and scenario fills two nodes to 110 pods each (the
kubelet's default maximum) with ReplicaSets of 4 replicas, every pod exiting 1 s after SIGTERM;
in the "4 budgets" scenario 4 of the ReplicaSets sit behind a PodDisruptionBudget with
maxUnavailable 1 (so their evictions wait for each replacement to be Ready elsewhere), in "no
budgets" none do. Then one node is cordoned and drained by `Drainer` (round after round
until Done, as `drain_until_done` does) and the other by
`kubectl drain --ignore-daemonsets --delete-emptydir-data --grace-period=30`, alternating which
goes first. Wall time from the cordon to "no movable pod left"; medians over the rounds.

Usage: python -m bench.drain_vs_kubectl [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from remediator.actions.drain import Drainer, drain_until_done
from remediator.actions.outcome import Done
from remediator.clock import utcnow
from remediator.kube.client import KubeClient
from remediator.sim.launch import SimHandle, start_sim

KUBECTL = "/usr/bin/kubectl"
NODES = 6
PODS_PER_NODE = 110
REPLICAS = 4
SCENARIOS = {"4 budgets": 4, "no budgets": 0}  # ReplicaSets behind a PodDisruptionBudget
GRACE = 30


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def manifest(namespace: str, pods: int, pdb_sets: int) -> str:
    """Namespace, ReplicaSets summing to `pods` replicas, and budgets over the first few."""
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    index = 0
    while pods > 0:
        replicas = min(REPLICAS, pods)
        pods -= replicas
        app = f"app-{index:02d}"
        docs.append(
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {"name": app, "namespace": namespace},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": app}},
                    "template": {
                        "metadata": {
                            "labels": {"app": app},
                            "annotations": {"sim.remediator.io/shutdown-seconds": "1"},
                        },
                        "spec": {
                            "terminationGracePeriodSeconds": GRACE,
                            "tolerations": [
                                {"key": "simcloud.io/dedicated", "operator": "Exists"},
                                {"key": "nvidia.com/gpu", "operator": "Exists"},
                            ],
                            "containers": [{"name": "app", "image": "busybox"}],
                            "volumes": [{"name": "scratch", "emptyDir": {}}],
                        },
                    },
                },
            }
        )
        if index < pdb_sets:
            docs.append(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": f"{app}-pdb", "namespace": namespace},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
                }
            )
        index += 1
    return yaml.safe_dump_all(docs)


def fill(
    sim: SimHandle, kube: KubeClient, node: str, namespace: str, nodes: list[str], pdb_sets: int
) -> None:
    """Put workloads on `node` until it runs PODS_PER_NODE pods: fence the others meanwhile."""
    others = [n for n in nodes if n != node]
    for other in others:
        kube.cordon(other)
    present = len(kube.list_pods_on_node(node))
    path = sim.workdir / f"{namespace}.yaml"
    path.write_text(manifest(namespace, PODS_PER_NODE - present, pdb_sets))
    sim.kubectl("create", "--validate=false", "-f", str(path))
    wait_for(
        lambda: sum(p.phase == "Running" for p in kube.list_pods_on_node(node)) == PODS_PER_NODE,
        120,
        f"{PODS_PER_NODE} running pods on {node}",
    )
    for other in others:
        kube.uncordon(other)


def clear(sim: SimHandle, kube: KubeClient, namespace: str) -> None:
    sim.kubectl("delete", "replicasets,poddisruptionbudgets", "--all", "-n", namespace)
    wait_for(lambda: not kube.list_pods(namespace), 120, f"{namespace} emptied")


def drain_ours(kube: KubeClient, node: str) -> float:
    started = time.monotonic()
    kube.cordon(node)
    outcome = drain_until_done(
        Drainer(kube), node, started_at=utcnow(), grace_seconds=GRACE, timeout_seconds=600
    )
    elapsed = time.monotonic() - started
    if not isinstance(outcome, Done):
        raise RuntimeError(f"our drain did not finish: {outcome}")
    return elapsed


def drain_kubectl(sim: SimHandle, node: str) -> float:
    started = time.monotonic()
    sim.kubectl(
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        f"--grace-period={GRACE}",
        "--timeout=600s",
        timeout=660,
    )
    return time.monotonic() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-drain-") as tmp:
        sim = start_sim(Path(tmp), nodes=NODES)
        try:
            kube = KubeClient.from_kubeconfig(sim.kubeconfig, timeout=30)
            for ns in ("training", "inference", "eval"):
                sim.kubectl(
                    "delete",
                    "jobs,deployments,replicasets,pods,poddisruptionbudgets",
                    "--all",
                    "-n",
                    ns,
                    "--wait=false",
                )
            wait_for(
                lambda: all(not kube.list_pods(ns) for ns in ("training", "inference", "eval")),
                120,
                "seeded workloads gone",
            )
            nodes = sorted(n.name for n in kube.list_nodes())
            ours_node, theirs_node = nodes[0], nodes[1]
            rows: dict[str, list[tuple[float, float]]] = {name: [] for name in SCENARIOS}
            for rnd in range(args.rounds):
                for scenario, pdb_sets in SCENARIOS.items():
                    ours_ns, theirs_ns = f"ours-{rnd}-{pdb_sets}", f"theirs-{rnd}-{pdb_sets}"
                    fill(sim, kube, ours_node, ours_ns, nodes, pdb_sets)
                    fill(sim, kube, theirs_node, theirs_ns, nodes, pdb_sets)
                    if rnd % 2 == 0:
                        ours = drain_ours(kube, ours_node)
                        theirs = drain_kubectl(sim, theirs_node)
                    else:
                        theirs = drain_kubectl(sim, theirs_node)
                        ours = drain_ours(kube, ours_node)
                    rows[scenario].append((ours, theirs))
                    print(
                        f"round {rnd + 1}, {scenario:<10}: ours {ours:6.2f} s   "
                        f"kubectl {theirs:6.2f} s   ratio {ours / theirs:.2f}",
                        flush=True,
                    )
                    for node in (ours_node, theirs_node):
                        kube.uncordon(node)
                    clear(sim, kube, ours_ns)
                    clear(sim, kube, theirs_ns)
            kube.close()
        finally:
            sim.stop()
    print()
    print(f"{'110-pod node drain':<20} {'ours s':>8} {'kubectl s':>10} {'ratio':>7}")
    worst = 0.0
    for scenario, results in rows.items():
        ours_median = statistics.median(r[0] for r in results)
        theirs_median = statistics.median(r[1] for r in results)
        ratio = statistics.median(r[0] / r[1] for r in results)
        worst = max(worst, ratio)
        print(f"{scenario:<20} {ours_median:>8.2f} {theirs_median:>10.2f} {ratio:>7.2f}")
    print("target: ratio ≤ 1.00 in every scenario (medians over rounds)")
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
