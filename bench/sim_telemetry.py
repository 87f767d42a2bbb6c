"""The simulated telemetry endpoint at fleet scale: 250 and 2,000 nodes x 8 GPUs, every GPU
with 17 DCGM series and every node 8 InfiniBand ports with 11 series each.

Method: a real SimCluster (nodes added as the cloud would), a Telemetry on a FakeClock. CPU time,
median of several runs, of: a cold render (first sight of every node), a render in a new time step
(the steady state of a scraper), a render answered from the per-step cache, and one node's render
(`?node=`). The baseline in the same run is prometheus_client's own `generate_latest` over the
same samples, handed over ready-made by a custom collector, so the ratio says what our renderer
costs against the stock client library doing only the formatting.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from remediator.clock import FakeClock
from remediator.sim.kube.controllers.cluster import SimCluster
from remediator.sim.telemetry.exporters import Telemetry

SIZES = (250, 2000)
GPUS = 8
RUNS = 5


def median_seconds(work: Callable[[], object], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return statistics.median(times)


class Replay:
    """A collector that hands prometheus_client the very families our endpoint served."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        for family in self._families:
            cls = CounterMetricFamily if family.type == "counter" else GaugeMetricFamily
            out = cls(family.name, family.documentation, labels=None)
            out.samples = family.samples
            yield out


def bench(nodes: int) -> list[tuple[str, float, float]]:
    clock = FakeClock()
    cluster = SimCluster(clock=clock)
    for i in range(nodes):
        cluster.add_node(f"h100-{i:05d}", "h100", GPUS)
    telemetry = Telemetry(cluster.store, clock)

    start = time.process_time()
    body = telemetry.render()
    cold = time.process_time() - start

    def new_step() -> bytes:
        clock.advance(1.0)
        return telemetry.render()

    steady = median_seconds(new_step)
    cached = median_seconds(telemetry.render)

    def one_node() -> bytes:
        clock.advance(1.0)
        return telemetry.render("h100-00000")

    one = median_seconds(one_node)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Replay(list(text_string_to_metric_families(body.decode()))))
    baseline = median_seconds(lambda: generate_latest(registry), runs=3)
    size_mb = len(body) / 1e6
    return [
        ("prometheus_client generate_latest, same samples", baseline, size_mb),
        ("cold render (first sight of every node)", cold, size_mb),
        ("render in a new time step", steady, size_mb),
        ("render from the per-step cache", cached, size_mb),
        ("one node (?node=), new time step", one, len(telemetry.render("h100-00000")) / 1e6),
    ]


def main() -> None:
    print("| nodes | case | MB | median CPU ms | ratio to client lib |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for nodes in SIZES:
        rows = bench(nodes)
        baseline = rows[0][1]
        for case, seconds, size_mb in rows:
            print(
                f"| {nodes} | {case} | {size_mb:.2f} | {seconds * 1000:.3g} | "
                f"{seconds / baseline:.3g} |"
            )


if __name__ == "__main__":
    main()
