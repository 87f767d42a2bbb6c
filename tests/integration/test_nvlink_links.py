"""DCGM's per-link NVLink error counters through a real Prometheus: a failing link is a signal
naming its GPU and link; a GPU whose exporter has only the totals still gives one per GPU."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.prometheus import (
    PrometheusQueries,
    PrometheusSource,
    PrometheusSourceConfig,
)
from tests.fixtures.prometheus import PrometheusFactory

pytestmark = pytest.mark.integration

COUNTERS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
LINKS = 18  # an NVL72 tray's GB200 has 18 NVLink5 links per GPU


class TrayExporter:
    """dcgm-exporter on two trays: `nvl-r0-t03` with per-link fields (GPU 2's link 5 counting up
    its replay errors, every other link quiet; GPU 0's link 9 down once errors start),
    `nvl-r0-t04` with the GPU totals only (GPU 1's CRC errors counting up)."""

    def __init__(self) -> None:
        self.errors = 0
        exporter = self

        def body() -> bytes:
            lines = []
            for counter in COUNTERS:
                name = f"DCGM_FI_DEV_NVLINK_{counter}_ERROR_COUNT"
                lines.append(f"# TYPE {name}_TOTAL counter")
                for gpu in range(4):
                    labels = f'gpu="{gpu}",UUID="GPU-t04-{gpu}",Hostname="nvl-r0-t04"'
                    value = exporter.errors if (gpu, counter) == (1, "CRC_FLIT") else 0
                    lines.append(f"{name}_TOTAL{{{labels}}} {value}")
                for link in range(LINKS):
                    lines.append(f"# TYPE {name}_L{link} counter")
                    for gpu in range(4):
                        labels = f'gpu="{gpu}",UUID="GPU-t03-{gpu}",Hostname="nvl-r0-t03"'
                        failing = (gpu, link, counter) == (2, 5, "REPLAY")
                        lines.append(
                            f"{name}_L{link}{{{labels}}} {exporter.errors if failing else 0}"
                        )
            lines.append("# TYPE DCGM_FI_DEV_NVLINK_GET_STATE gauge")
            for gpu in range(4):
                labels = f'gpu="{gpu}",UUID="GPU-t03-{gpu}",Hostname="nvl-r0-t03"'
                for link in range(LINKS):
                    up = 0 if (gpu, link) == (0, 9) and exporter.errors else 1
                    lines.append(f'DCGM_FI_DEV_NVLINK_GET_STATE{{{labels},nvlink="{link}"}} {up}')
            return ("\n".join(lines) + "\n").encode()

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


@pytest.fixture
def exporter() -> Iterator[TrayExporter]:
    running = TrayExporter()
    yield running
    running.close()


def nvlink(signals: list[Signal]) -> dict[tuple[str, int | None, int | None], Signal]:
    return {(s.node, s.gpu, s.code): s for s in signals if s.kind is SignalKind.NVLINK}


def test_a_failing_link_names_its_gpu_and_link(
    exporter: TrayExporter, prometheus_factory: PrometheusFactory
) -> None:
    prometheus = prometheus_factory([exporter.url])
    prometheus.wait_for("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L5")
    queries = PrometheusQueries.with_windows(counters="30s")
    source = PrometheusSource(
        PrometheusSourceConfig(
            url=prometheus.url,
            queries=queries.model_copy(
                update={k: None for k in ("xid", "thermal", "ecc", "row_remap", "maintenance")}
                | {"gpu_missing": None, "infiniband": None}
            ),
            freshness={
                "dcgm": "time() - max(timestamp(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL))"
            },
            staleness_seconds=30,
            timeout_seconds=10,
        )
    )
    try:
        quiet = source.poll(datetime.now(UTC))
        assert quiet.health.up, quiet.health.error
        assert nvlink(quiet.signals) == {}
        deadline = time.monotonic() + 90
        found: dict[tuple[str, int | None, int | None], Signal] = {}
        while len(found) < 3:
            assert time.monotonic() < deadline, f"only {sorted(found)} after 90 s"
            exporter.errors += 3
            time.sleep(1.0)
            result = source.poll(datetime.now(UTC))
            assert result.health.up, result.health.error
            found.update(nvlink(result.signals))
        assert set(found) == {
            ("nvl-r0-t03", 2, None),
            ("nvl-r0-t04", 1, None),
            ("nvl-r0-t03", 0, 1),
        }
        link = found[("nvl-r0-t03", 2, None)]
        assert link.labels["link"] == "5" and (link.value or 0) > 0
        assert found[("nvl-r0-t04", 1, None)].labels.get("link") is None  # totals only: the GPU
        down = found[("nvl-r0-t03", 0, 1)]  # code 1: link_down
        assert down.labels["link"] == "9" and down.labels["problem"] == "link_down"
    finally:
        source.close()
