"""The Prometheus source against a real Prometheus scraping the simulator's telemetry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.policy.evaluate import EvalState, History, evaluate
from remediator.policy.interest import interest_of
from remediator.policy.loader import load_policy_dir
from remediator.signals.interest import Interest, ReadingFilter
from remediator.signals.maintenance import MaintenanceEvent
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import SourceResult
from remediator.signals.sources.prometheus import (
    PrometheusQueries,
    PrometheusSource,
    PrometheusSourceConfig,
)
from tests.fixtures.prometheus import PrometheusFactory, PrometheusHandle
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

NODES, GPUS = 4, 8
HOT = 78.0  # the lab's rule of thumb: above this a GPU is pulled
POLICIES = Path(__file__).resolve().parents[2] / "policies"


def now() -> datetime:
    return datetime.now(UTC)


def source_for(url: str, **overrides: Any) -> PrometheusSource:
    # Short windows so that counters and vanished series show up within seconds.
    queries = PrometheusQueries.with_windows(counters="30s", missing="8s", symbol_errors="1m")
    settings: dict[str, Any] = {"staleness_seconds": 30, "timeout_seconds": 10, **overrides}
    return PrometheusSource(PrometheusSourceConfig(url=url, queries=queries, **settings))


def poll_until(
    source: PrometheusSource,
    predicate: Callable[[SourceResult], bool],
    timeout: float = 60.0,
    seen: list[SourceResult] | None = None,
) -> SourceResult:
    """Poll until `predicate` holds; every result is appended to `seen` when given."""
    deadline = time.monotonic() + timeout
    while True:
        result = source.poll(now())
        if seen is not None:
            seen.append(result)
        if predicate(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout}s; last: {result}")
        time.sleep(0.5)


@dataclass
class Stack:
    sim: SimHandle
    prometheus: PrometheusHandle
    source: PrometheusSource
    nodes: list[str]

    def inject(self, **fault: Any) -> None:
        response = httpx.post(f"{self.sim.inject_url}/v1/faults", json=fault, timeout=10.0)
        assert response.status_code == 200, response.text


@pytest.fixture
def stack(
    sim_factory: Callable[..., SimHandle], prometheus_factory: PrometheusFactory
) -> Iterator[Stack]:
    sim = sim_factory(nodes=NODES, gpus_per_node=GPUS)
    prometheus = prometheus_factory([f"{sim.metrics_url}/metrics"])
    prometheus.wait_for(f"count(DCGM_FI_DEV_GPU_TEMP) == {NODES * GPUS}")
    names = prometheus.query("group by (Hostname) (DCGM_FI_DEV_GPU_TEMP)")
    source = source_for(prometheus.url)
    yield Stack(sim, prometheus, source, sorted(s["metric"]["Hostname"] for s in names))
    source.close()


def faults(result: SourceResult) -> list[Signal]:
    return [
        s
        for s in result.signals
        if s.kind is not SignalKind.THERMAL or (s.value is not None and s.value > HOT)
    ]


def test_healthy_fleet_then_each_fault_on_the_right_node_and_gpu(stack: Stack) -> None:
    healthy = stack.source.poll(now())
    assert healthy.health.up, healthy.health.error
    assert faults(healthy) == []
    readings = [s for s in healthy.signals if s.kind is SignalKind.THERMAL]
    assert len(readings) == NODES * GPUS  # every reading, so policies can apply `for:`
    assert {(s.node, s.gpu) for s in readings} == {(n, g) for n in stack.nodes for g in range(GPUS)}

    off_bus, hot, flaky, no_ib = stack.nodes
    stack.inject(type="xid", node=off_bus, gpu=3, code=79)
    stack.inject(type="temperature", node=hot, gpu=5, celsius=90, rate=50)
    stack.inject(type="nvlink_errors", node=flaky, gpu=1, count=40)
    stack.inject(type="xid", node=flaky, gpu=6, code=48)  # a double-bit ECC error
    stack.inject(type="ib_link_down", node=no_ib, device="mlx5_2")

    expected = {
        (off_bus, 3, SignalKind.XID),
        (off_bus, 3, SignalKind.GPU_MISSING),  # off the bus: its temperature series is gone
        (hot, 5, SignalKind.THERMAL),
        (flaky, 1, SignalKind.NVLINK),
        (flaky, 6, SignalKind.XID),
        (flaky, 6, SignalKind.ECC),
        (flaky, 6, SignalKind.MAINTENANCE),  # the row it remapped waits for a GPU reset
        (no_ib, None, SignalKind.INFINIBAND),
    }
    history: list[SourceResult] = []

    def all_seen(_latest: SourceResult) -> bool:
        signals = [s for r in history for s in faults(r)]
        ecc_codes = {s.code for s in signals if s.kind is SignalKind.ECC}
        return expected <= {(s.node, s.gpu, s.kind) for s in signals} and ecc_codes == {1, 2}

    poll_until(stack.source, all_seen, seen=history)
    signals = [s for r in history for s in faults(r)]
    assert all(r.health.up for r in history)
    assert {(s.node, s.gpu, s.kind) for s in signals} == expected  # nothing anywhere else
    xid = next(s for s in signals if s.kind is SignalKind.XID and s.node == off_bus)
    assert (xid.code, xid.labels["err_msg"]) == (79, "GPU has fallen off the bus")
    assert {s.code for s in signals if s.kind is SignalKind.XID and s.node == flaky} == {48}
    # A new DBE in the window (code 1) and the lifetime count above zero (code 2).
    assert {s.code for s in signals if s.kind is SignalKind.ECC} == {1, 2}
    assert xid.gpu_uuid is not None and xid.gpu_uuid.startswith("GPU-")
    assert max(s.value or 0 for s in signals if s.kind is SignalKind.THERMAL) >= 85
    assert all((s.value or 0) > 0 for s in signals if s.kind is SignalKind.NVLINK)
    ib = [s for s in signals if s.kind is SignalKind.INFINIBAND]
    assert {s.labels["device"] for s in ib} == {"mlx5_2"}
    assert 1 in {s.code for s in ib}  # link down (state / physical state)


def test_prometheus_stopped_mid_run_means_down_then_back(stack: Stack) -> None:
    first = stack.source.poll(now())
    assert first.health.up
    stack.prometheus.stop()
    down = stack.source.poll(now())
    assert not down.health.up
    assert down.signals == ()
    assert "unreachable" in (down.health.error or "")
    assert down.health.last_success_at == first.health.checked_at
    stack.prometheus.start()
    # Back with every GPU read anew: the samples from before the stop were read already.
    back = poll_until(
        stack.source, lambda r: r.health.up and len(r.signals) == NODES * GPUS, timeout=60
    )
    assert all(s.observed_at > first.health.checked_at for s in back.signals)


class FrozenExporter:
    """An exporter that keeps answering with the same explicitly timestamped samples, as a
    stuck textfile collector or federation source does: Prometheus keeps the old sample and
    queries keep returning it, so only its age reveals that nothing is fresh."""

    def __init__(self) -> None:
        frozen: list[bytes] = []

        def body() -> bytes:
            if not frozen:  # the first scrape fixes the samples and their time
                stamp = int(time.time() * 1000)
                labels = 'gpu="0",UUID="GPU-0",Hostname="frozen-1"'
                frozen.append(
                    (
                        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
                        f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} 55 {stamp}\n"
                        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
                        f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} 79 {stamp}\n"
                    ).encode()
                )
            return frozen[0]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_stale_exporter_data_means_down_without_signals(
    prometheus_factory: PrometheusFactory,
) -> None:
    exporter = FrozenExporter()
    try:
        prometheus = prometheus_factory([exporter.url])
        prometheus.wait_for("DCGM_FI_DEV_XID_ERRORS")
        source = source_for(prometheus.url, staleness_seconds=5)
        fresh = poll_until(source, lambda r: r.health.up, timeout=120)
        assert [(s.kind, s.code) for s in fresh.signals if s.kind is SignalKind.XID] == [
            (SignalKind.XID, 79)
        ]
        stale = poll_until(source, lambda r: not r.health.up, timeout=120)
        assert stale.signals == ()
        assert "stale" in (stale.health.error or "")
        source.close()
    finally:
        exporter.close()


# -- narrowed queries and sample time (issue 18, issue 9 item 4) -----------------------------


def thermal(result: SourceResult) -> list[Signal]:
    return [s for s in result.signals if s.kind is SignalKind.THERMAL]


def test_narrowed_queries_answer_only_what_the_policies_act_on(stack: Stack) -> None:
    policies = load_policy_dir(POLICIES).policies
    stack.source.set_interest(interest_of(policies))
    healthy = stack.source.poll(now())
    assert healthy.health.up, healthy.health.error
    assert thermal(healthy) == []  # a healthy fleet: nothing at or above 75 °C comes back
    # Coverage still counts every GPU, so an empty answer is "all below", not "not exported".
    assert healthy.health.detail["thermal_series"] == str(NODES * GPUS)

    hot = stack.nodes[1]
    stack.inject(type="temperature", node=hot, gpu=5, celsius=90, rate=100)
    polled = now()
    seen = poll_until(stack.source, lambda r: any((s.value or 0) >= 85 for s in thermal(r)))
    readings = thermal(seen)
    assert {(s.node, s.gpu) for s in readings} == {(hot, 5)}
    # The sample's own time, not the poll's.
    assert all(polled - timedelta(seconds=5) < s.observed_at <= now() for s in readings)

    # Cooled down: the series stays in the answer with its real, low value for the look-back
    # (longer than any gap), which is what ends a running streak.
    stack.inject(type="temperature", node=hot, gpu=5, celsius=40, rate=100)
    cool = poll_until(stack.source, lambda r: any((s.value or 99) < 75 for s in thermal(r)))
    assert {(s.node, s.gpu) for s in thermal(cool)} == {(hot, 5)}

    # After the look-back it leaves the answer (a short look-back here, to see it happen).
    short = ReadingFilter(at_least=75.0, at_most=None, recent=timedelta(seconds=4))
    stack.source.set_interest(Interest(kinds=None, readings={SignalKind.THERMAL: short}))
    gone = poll_until(stack.source, lambda r: r.health.up and thermal(r) == [], timeout=120)
    assert gone.health.detail["thermal_series"] == str(NODES * GPUS)


class SettableExporter:
    """One GPU's temperature, set by the test; `failing` answers 503, as an exporter a freshly
    restarted Prometheus has not scraped yet looks to its queries."""

    def __init__(self, node: str) -> None:
        self.celsius = 45.0
        self.failing = False
        exporter = self
        labels = f'gpu="0",UUID="GPU-0",Hostname="{node}"'

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if exporter.failing:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = (
                    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
                    f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} {exporter.celsius}\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_frozen_sample_after_a_prometheus_restart_does_not_complete_a_streak(
    prometheus_factory: PrometheusFactory,
) -> None:
    """Issue 9 item 4, at its real durations: a GPU at 90 °C for ~14 s, Prometheus stopped,
    the GPU back at 45 °C; Prometheus restarted on the same storage answers with the 106-s-old
    90 °C sample as the newest (fresh enough for the 120 s freshness bound). It must not count:
    it was read before, and it is older than the sample bound. The shipped heat policy (≥ 78 °C
    for 2 minutes) must not act."""
    exporter = SettableExporter("hot-1")
    policy_set = load_policy_dir(POLICIES)
    heat = [p for p in policy_set.policies if p.match.kind is SignalKind.THERMAL]
    state = EvalState()
    decisions: list[str] = []

    def cycle() -> SourceResult:
        nonlocal state
        result = source.poll(now())
        evaluation = evaluate(
            result.signals, History(state=state), heat, now(), policy_set.settings
        )
        state = evaluation.state
        decisions.extend(d.reason for d in evaluation.decisions)
        return result

    try:
        exporter.celsius = 90.0
        prometheus = prometheus_factory([exporter.url])
        prometheus.wait_for("DCGM_FI_DEV_GPU_TEMP >= 90")
        source = PrometheusSource(PrometheusSourceConfig(url=prometheus.url))
        source.set_interest(interest_of(heat))
        started = time.monotonic()
        hot: list[float | None] = []
        while time.monotonic() - started < 14:
            hot.extend(s.value for s in thermal(cycle()))
            time.sleep(1.0)
        assert hot and set(hot) == {90.0}
        assert state.streaks  # a breach is running

        prometheus.stop()
        exporter.celsius, exporter.failing = 45.0, True
        time.sleep(max(0.0, 120 - (time.monotonic() - started)))
        prometheus.start()
        after = cycle()
        assert after.health.up, after.health.error  # the freshness bound still passes...
        age = float(after.health.detail["dcgm_newest_sample_age_seconds"])
        assert 100 <= age <= 120, age
        assert thermal(after) == []  # ...but the frozen 90 °C sample is not a reading
        assert decisions == []
        cycle()
        assert decisions == []
        source.close()
    finally:
        exporter.close()


def test_a_pending_row_remap_is_one_maintenance_event_until_the_reset_clears_it(
    stack: Stack,
) -> None:
    node = stack.nodes[1]
    stack.inject(type="row_remap_pending", node=node, gpu=4)

    def pending(result: SourceResult) -> list[Signal]:
        return [s for s in result.signals if s.kind is SignalKind.MAINTENANCE]

    first = pending(poll_until(stack.source, lambda r: bool(pending(r))))
    assert [(s.node, s.gpu, s.labels["status"]) for s in first] == [(node, 4, "scheduled")]
    event = MaintenanceEvent.of(first[0])
    assert (event.code, event.origin.value, event.deadline) == ("row-remap-pending", "dcgm", None)
    assert event.event_id.startswith("GPU-")  # the exporter's UUID names the GPU
    again = pending(poll_until(stack.source, lambda r: bool(pending(r))))
    assert [MaintenanceEvent.of(s).event_id for s in again] == [event.event_id]
    # A GPU reset (the sim's clear of that GPU) ends it, once.
    stack.inject(type="clear", node=node, gpu=4)
    history: list[SourceResult] = []
    poll_until(
        stack.source,
        lambda r: any(s.labels.get("status") == "completed" for s in pending(r)),
        seen=history,
    )
    assert [s.labels["status"] for r in history for s in pending(r)].count("completed") == 1
    assert pending(stack.source.poll(now())) == []
