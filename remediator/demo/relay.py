"""Telemetry relay for a demo without Prometheus: scrape the simulator's DCGM and InfiniBand
exporter endpoint, turn what a Prometheus source would report into signals, and send them to the
controller's push API (`POST /api/v1/signals`), the production intake other systems use.

It covers the kinds the demo's faults produce: XIDs (the gauge holds the last code), GPU
temperatures, NVLink error counters and InfiniBand links. Counters are compared with the previous
scrape, as `increase()` would, so the first scrape only sets the baseline. With Prometheus
installed the demo does not start the relay: the controller queries Prometheus itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from remediator.clock import Clock, SystemClock
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.prometheus import gpu_index, node_name

log = logging.getLogger(__name__)

SOURCE = "demo-relay"
MAX_BATCH = 5_000  # the push API's limit per request
XID = "DCGM_FI_DEV_XID_ERRORS"
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"
NVLINK_COUNTERS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
NVLINK = tuple(f"DCGM_FI_DEV_NVLINK_{c}_ERROR_COUNT_TOTAL" for c in NVLINK_COUNTERS)
IB_STATE, IB_STATE_ACTIVE = "node_infiniband_state_id", 4
IB_PHYSICAL, IB_LINK_UP = "node_infiniband_physical_state_id", 5
IB_LINK_DOWNED = "node_infiniband_link_downed_total"
# The codes the Prometheus source gives these problems (PrometheusSourceConfig.problem_codes).
LINK_DOWN, LINK_FLAP = 1, 2

CounterKey = tuple[str, tuple[tuple[str, str], ...]]


# DCGM's label (old and new spelling), then node_exporter's as the demo's scrape adds it.
NODE_LABELS = ("Hostname", "hostname", "node")


@dataclass(frozen=True)
class Scrape:
    signals: tuple[Signal, ...]
    counters: Mapping[CounterKey, float] = field(default_factory=dict)


def _node(labels: Mapping[str, str]) -> str | None:
    return node_name(labels, NODE_LABELS)


def _exposed(sample_name: str) -> str:
    """The name as the exporter wrote it: the parser appends `_total` to a counter sample whose
    name lacks it in lower case, as DCGM's upper-case `…_COUNT_TOTAL` does."""
    head, sep, tail = sample_name.rpartition("_total")
    return head if sep and not tail and head.endswith("_TOTAL") else sample_name


def _increase(previous: float | None, current: float) -> float:
    """What `increase()` sees between two samples; a counter that went down was reset."""
    if previous is None:
        return 0.0
    return current - previous if current >= previous else current


def to_signals(
    text: str, previous: Mapping[CounterKey, float], now: datetime, source: str = SOURCE
) -> Scrape:
    """Pure: one exposition-format scrape (and the last scrape's counters) → signals."""
    signals: list[Signal] = []
    counters: dict[CounterKey, float] = {}
    nvlink: dict[tuple[str, int | None], tuple[float, dict[str, str]]] = {}

    def add(
        kind: SignalKind,
        labels: dict[str, str],
        code: int | None = None,
        value: float | None = None,
    ) -> None:
        node = _node(labels)
        if node is None:
            return
        try:
            signal = Signal(
                node=node,
                kind=kind,
                source=source,
                observed_at=now,
                gpu=gpu_index(labels),
                gpu_uuid=labels.get("UUID") or None,
                code=code,
                value=value,
                labels=labels,
            )
        except ValidationError:  # out of bounds (signals.bounds): as the Prometheus source does
            return
        signals.append(signal)

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = _exposed(sample.name), dict(sample.labels), float(sample.value)
            if name == XID and value != 0:
                add(SignalKind.XID, labels, code=int(value))
            elif name == TEMPERATURE:
                add(SignalKind.THERMAL, labels, value=value)
            elif name in NVLINK or name == IB_LINK_DOWNED:
                key: CounterKey = (name, tuple(sorted(labels.items())))
                counters[key] = value
                grew = _increase(previous.get(key), value)
                if name == IB_LINK_DOWNED and grew > 0:
                    add(SignalKind.INFINIBAND, {**labels, "problem": "link_flap"}, code=LINK_FLAP)
                elif name in NVLINK and (node := _node(labels)) is not None:
                    total, _ = nvlink.get((node, gpu_index(labels)), (0.0, labels))
                    nvlink[(node, gpu_index(labels))] = (total + grew, labels)
            elif (name == IB_STATE and value != IB_STATE_ACTIVE) or (
                name == IB_PHYSICAL and value != IB_LINK_UP
            ):
                add(SignalKind.INFINIBAND, {**labels, "problem": "link_down"}, code=LINK_DOWN)
    for (_node_name, _gpu_index), (total, labels) in sorted(
        nvlink.items(), key=lambda item: (item[0][0], item[0][1] or 0)
    ):
        if total > 0:
            add(SignalKind.NVLINK, labels, value=total)
    return Scrape(tuple(signals), counters)


def batches(signals: Iterable[Signal], size: int = MAX_BATCH) -> list[list[Signal]]:
    out: list[list[Signal]] = [[]]
    for signal in signals:
        if len(out[-1]) == size:
            out.append([])
        out[-1].append(signal)
    return [batch for batch in out if batch]


class Relay:
    """Scrape, convert and push every `interval` seconds until `stop` is set."""

    def __init__(
        self,
        metrics_url: str,
        console_url: str,
        token: str,
        *,
        interval: float = 2.0,
        clock: Clock | None = None,
    ) -> None:
        self._metrics = metrics_url.rstrip("/") + "/metrics"
        self._push = console_url.rstrip("/") + "/api/v1/signals"
        self._headers = {"Authorization": f"Bearer {token}"}
        self._interval = interval
        self._clock = clock or SystemClock()
        self._counters: Mapping[CounterKey, float] = {}
        self.pushed = 0

    def once(self, client: httpx.Client) -> int:
        """One scrape and push; returns the number of signals the controller accepted."""
        scraped = client.get(self._metrics)
        scraped.raise_for_status()
        scrape = to_signals(scraped.text, self._counters, self._clock.now())
        accepted = 0
        for batch in batches(scrape.signals):
            body = [s.model_dump(mode="json") for s in batch]
            response = client.post(self._push, json=body, headers=self._headers)
            response.raise_for_status()
            accepted += int(response.json().get("accepted", 0))
        # Only after a successful push: a lost push must not swallow a counter's increase.
        self._counters = scrape.counters
        self.pushed += accepted
        return accepted

    def run(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=10.0) as client:
            while not stop.is_set():
                try:
                    self.once(client)
                except httpx.HTTPError as exc:
                    log.warning("relay: %s", exc)
                stop.wait(self._interval)
