"""Signal sources at fleet scale: the per-cycle CPU cost of turning answers into signals.

Cases, each as CPU time (median of several runs) and as a ratio to a bare loop over the same
input within this run:
- Prometheus: one thermal query's answer for 10,000 nodes x 8 GPUs → 80,000 `Signal`s.
- Node conditions: one LIST of 5,000 nodes, decoded as raw JSON (what the source does) versus
  the kubernetes client's models (`ApiClient.deserialize` into `V1NodeList`).
- Dedup: a `SignalFolder` cycle over those 80,000 readings plus 2,000 repeated XID events.
- The hardware ledger (#28, target < 10%): the same fold cycle followed by `Ledger.resolve`
  before it, as the intake does (migrated SQLite, every placement known from a first cycle).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client import ApiClient

from bench.evaluate_scale import warm_ledger
from remediator.kube.objects import Node
from remediator.signals.dedup import SignalFolder
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.node_conditions import NodeConditionConfig, node_signals
from remediator.signals.sources.prometheus import PrometheusSourceConfig, to_signals
from remediator.sim.kube.controllers.builders import node as sim_node

NODES, GPUS, LIST_NODES = 10_000, 8, 5_000
RUNS = 5
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def cpu_median(work: Callable[[], object]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return statistics.median(times)


def thermal_answer() -> list[dict[str, Any]]:
    return [
        {
            "metric": {
                "__name__": "DCGM_FI_DEV_GPU_TEMP",
                "gpu": str(g),
                "UUID": f"GPU-{n:05d}-{g}",
                "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0",
                "device": f"nvidia{g}",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": f"gpu-node-{n:05d}",
                "job": "dcgm-exporter",
                "instance": f"10.0.{n // 250}.{n % 250}:9400",
            },
            "value": [1767225600.0, str(50 + (n + g) % 25)],
        }
        for n in range(NODES)
        for g in range(GPUS)
    ]


def main() -> None:
    rows: list[tuple[str, float, float]] = []

    answer = thermal_answer()
    config = PrometheusSourceConfig(url="http://127.0.0.1:9090")

    def bare_answer() -> None:
        total = 0.0
        for series in answer:
            total += float(series["value"][1])

    base = cpu_median(bare_answer)
    rows.append(("bare loop over 80,000 Prometheus series", base, 1.0))
    mapped = cpu_median(lambda: to_signals(SignalKind.THERMAL, answer, config, "prom", NOW))
    rows.append(("to_signals: 80,000 thermal readings", mapped, mapped / base))

    nodes = [sim_node(f"gpu-node-{n:05d}", "h100-a", 8, None, True, NOW) for n in range(LIST_NODES)]
    body = json.dumps({"kind": "NodeList", "apiVersion": "v1", "items": nodes}).encode()
    client = ApiClient()
    cond_config = NodeConditionConfig()

    def bare_list() -> None:
        for item in json.loads(body)["items"]:
            item.get("metadata")

    list_base = cpu_median(bare_list)
    rows.append(("json.loads of a 5,000-node LIST", list_base, 1.0))
    raw = cpu_median(
        lambda: node_signals(
            [Node.from_json(item) for item in json.loads(body)["items"]], cond_config, "nodes", NOW
        )
    )
    rows.append(("raw JSON + Node.from_json + node_signals (the source)", raw, raw / list_base))
    text = body.decode()
    models = cpu_median(lambda: client.deserialize(text, "V1NodeList", "application/json"))
    rows.append(("kubernetes client models (V1NodeList)", models, models / list_base))

    readings = to_signals(SignalKind.THERMAL, answer, config, "prom", NOW)[0]
    events = [
        Signal(
            node=f"gpu-node-{n:05d}",
            kind=SignalKind.XID,
            source="prom",
            observed_at=NOW,
            gpu=n % GPUS,
            code=79,
        )
        for n in range(2_000)
    ]
    cycle = readings + events

    def bare_cycle() -> None:
        kinds = set()
        for signal in cycle:
            kinds.add(signal.kind)

    cycle_base = cpu_median(bare_cycle)
    rows.append(("bare loop over 82,000 signals", cycle_base, 1.0))
    folder = SignalFolder(window=timedelta(minutes=10))
    folder.fold(cycle, NOW)  # the events are now known: the timed cycles fold them all away
    fold_time = cpu_median(lambda: folder.fold(cycle, NOW))
    rows.append(("SignalFolder.fold, steady cycle", fold_time, fold_time / cycle_base))

    scratch = tempfile.TemporaryDirectory()
    ledger = warm_ledger(scratch.name, cycle)

    def fold_and_link() -> None:
        # The intake's order: what passed the screen is linked, then folded.
        folder.fold(ledger.resolve(cycle), NOW)

    linked = cpu_median(fold_and_link)
    scratch.cleanup()
    rows.append(("fold + Ledger.resolve, steady cycle", linked, linked / cycle_base))

    print(f"{'case':<44} {'CPU s':>8} {'ratio':>8}")
    for name, seconds, ratio in rows:
        print(f"{name:<44} {seconds:>8.3f} {ratio:>8.1f}")
    print(f"hardware ledger linking adds {100 * (linked / fold_time - 1):.1f}% to the fold cycle")


if __name__ == "__main__":
    main()
