"""The relay's scrape → signals mapping, and one real scrape-and-push over loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from remediator.demo.relay import Relay, batches, to_signals
from remediator.signals.model import Signal, SignalKind

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GPU = 'gpu="{g}",UUID="GPU-{g}",Hostname="{n}"'


def gpu_line(metric: str, node: str, gpu: int, value: float) -> str:
    return f"{metric}{{{GPU.format(g=gpu, n=node)}}} {value}"


def exposition(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_xid_gauge_and_temperatures() -> None:
    text = exposition(
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
        gpu_line("DCGM_FI_DEV_XID_ERRORS", "n1", 0, 0),
        gpu_line("DCGM_FI_DEV_XID_ERRORS", "n1", 3, 79),
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        gpu_line("DCGM_FI_DEV_GPU_TEMP", "n1", 3, 91.5),
    )
    scrape = to_signals(text, {}, NOW)
    xid, temp = scrape.signals
    assert (xid.kind, xid.node, xid.gpu, xid.code, xid.gpu_uuid) == (
        SignalKind.XID,
        "n1",
        3,
        79,
        "GPU-3",
    )
    assert (temp.kind, temp.gpu, temp.value, temp.observed_at) == (SignalKind.THERMAL, 3, 91.5, NOW)


def nvlink(node: str, gpu: int, crc: float, replay: float) -> str:
    return exposition(
        "# TYPE DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL counter",
        gpu_line("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", node, gpu, crc),
        "# TYPE DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL counter",
        gpu_line("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", node, gpu, replay),
    )


def test_nvlink_counters_report_the_increase_since_the_last_scrape() -> None:
    first = to_signals(nvlink("n1", 2, 10, 5), {}, NOW)
    assert first.signals == ()  # the first scrape only sets the baseline
    second = to_signals(nvlink("n1", 2, 110, 25), first.counters, NOW)
    (signal,) = second.signals
    assert (signal.kind, signal.node, signal.gpu, signal.value) == (SignalKind.NVLINK, "n1", 2, 120)
    quiet = to_signals(nvlink("n1", 2, 110, 25), second.counters, NOW)
    assert quiet.signals == ()
    # A counter that went down was reset (exporter restart): its new value is the increase.
    reset = to_signals(nvlink("n1", 2, 7, 25), second.counters, NOW)
    assert [s.value for s in reset.signals] == [7]


def test_infiniband_link_down_and_flap_carry_the_prometheus_sources_codes() -> None:
    port = 'device="mlx5_0",port="1",node="n2"'
    text = exposition(
        "# TYPE node_infiniband_state_id gauge",
        f"node_infiniband_state_id{{{port}}} 1",
        "# TYPE node_infiniband_physical_state_id gauge",
        f"node_infiniband_physical_state_id{{{port}}} 5",
        "# TYPE node_infiniband_link_downed_total counter",
        f"node_infiniband_link_downed_total{{{port}}} 3",
    )
    baseline = {
        ("node_infiniband_link_downed_total", (("device", "mlx5_0"), ("node", "n2"), ("port", "1")))
    }
    previous = {key: 1.0 for key in baseline}
    signals = to_signals(text, previous, NOW).signals
    assert [(s.kind, s.node, s.code, s.labels["problem"]) for s in signals] == [
        (SignalKind.INFINIBAND, "n2", 1, "link_down"),
        (SignalKind.INFINIBAND, "n2", 2, "link_flap"),
    ]


def test_series_without_a_node_are_skipped() -> None:
    text = exposition("# TYPE DCGM_FI_DEV_GPU_TEMP gauge", 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 50')
    assert to_signals(text, {}, NOW).signals == ()


def test_series_out_of_bounds_are_skipped_not_fatal() -> None:
    text = exposition(
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        gpu_line("DCGM_FI_DEV_GPU_TEMP", "n1", 0, float("nan")),
        gpu_line("DCGM_FI_DEV_GPU_TEMP", "N_1", 1, 50),
        gpu_line("DCGM_FI_DEV_GPU_TEMP", "n1", 2, 50),
    )
    assert [s.gpu for s in to_signals(text, {}, NOW).signals] == [2]


def make_signal(i: int) -> Signal:
    return Signal(node=f"n{i}", kind=SignalKind.THERMAL, source="t", observed_at=NOW, value=40)


def test_batches_respect_the_push_apis_limit() -> None:
    assert [len(b) for b in batches([make_signal(i) for i in range(7)], size=3)] == [3, 3, 1]
    assert batches([]) == []


class Endpoints(BaseHTTPRequestHandler):
    """The exporter's /metrics and the console's push API, as the relay sees them."""

    metrics = ""
    pushed: list[Any] = []
    headers_seen: list[str] = []

    def do_GET(self) -> None:
        body = type(self).metrics.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        batch = json.loads(self.rfile.read(length))
        type(self).pushed.append(batch)
        type(self).headers_seen.append(self.headers.get("Authorization", ""))
        body = json.dumps({"accepted": len(batch)}).encode()
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


@pytest.fixture
def endpoints() -> Iterator[str]:
    Endpoints.pushed, Endpoints.headers_seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoints)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_relay_scrapes_and_pushes_with_the_token(endpoints: str) -> None:
    Endpoints.metrics = exposition(
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge", gpu_line("DCGM_FI_DEV_XID_ERRORS", "n1", 1, 48)
    )
    relay = Relay(endpoints, endpoints, "secret-token")
    with httpx.Client(timeout=5.0) as client:
        assert relay.once(client) == 1
    (batch,) = Endpoints.pushed
    assert [(s["node"], s["kind"], s["code"]) for s in batch] == [("n1", "xid", 48)]
    assert Endpoints.headers_seen == ["Bearer secret-token"]
    assert relay.pushed == 1


def test_relay_run_keeps_going_when_the_console_is_away(endpoints: str) -> None:
    Endpoints.metrics = exposition(
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge", gpu_line("DCGM_FI_DEV_XID_ERRORS", "n1", 1, 79)
    )
    relay = Relay(endpoints, "http://127.0.0.1:9", "t", interval=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=relay.run, args=(stop,))
    thread.start()
    stop.wait(0.3)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert relay.pushed == 0
