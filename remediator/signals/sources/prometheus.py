"""Prometheus source: DCGM exporter and node_exporter InfiniBand series → signals.

One PromQL query per signal kind per cycle, whatever the fleet size, plus one freshness query
first: if the exporter's newest sample is older than the staleness bound (or there is none),
Prometheus is answering about the past, so the source reports itself down instead of "healthy".
Any failed query also makes the whole poll down: a partial answer would read as "no XIDs".
Every kind is queried at the evaluation time of the first freshness answer, so one poll is one
snapshot: a scrape landing between two queries cannot show a GPU off the bus as "missing" before
its XID 79 is visible.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from urllib3.util.retry import Retry

from remediator.signals.dedup import COUNTER_WINDOW as FOLD_COUNTER_WINDOW
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import HealthTracker, SourceResult

GPU_KEYS = "Hostname, hostname, gpu, UUID"
NODE_KEYS = "Hostname, hostname"
NVLINK_COUNTERS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
# The look-back of the counter queries: the NVLink fold window, so that one burst is one event
# (see signals/dedup.py). Two minutes are four DCGM scrapes: one missed scrape hides nothing.
COUNTER_WINDOW = f"{int(FOLD_COUNTER_WINDOW.total_seconds())}s"


def _tag(expr: str, problem: str) -> str:
    """Mark a sub-query's series with a `problem` label, which the source maps to a code."""
    return f'label_replace({expr}, "problem", "{problem}", "", "")'


class PrometheusQueries(BaseModel):
    """PromQL per signal kind; None turns a kind off. Every query returns an instant vector
    whose series carry a node label (and `gpu` for GPU kinds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    xid: str | None = "DCGM_FI_DEV_XID_ERRORS != 0"
    thermal: str | None = "DCGM_FI_DEV_GPU_TEMP"
    # Each counter is tagged before the sum: increase() drops the metric name, and several
    # series with one label set in a vector is an execution error in PromQL.
    nvlink: str | None = (
        f"sum by ({GPU_KEYS}) ("
        + " or ".join(
            f"label_replace(increase(DCGM_FI_DEV_NVLINK_{c}_ERROR_COUNT_TOTAL[{COUNTER_WINDOW}]),"
            f' "counter", "{c.lower()}", "", "")'
            for c in NVLINK_COUNTERS
        )
        + ") > 0"
    )
    # New double-bit errors (code 1) are told apart from a lifetime count above zero (code 2),
    # which stays true long after the event.
    ecc: str | None = " or ".join(
        (
            _tag(
                f"sum by ({GPU_KEYS})"
                f" (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[{COUNTER_WINDOW}])) > 0",
                "dbe_volatile",
            ),
            _tag(f"max by ({GPU_KEYS}) (DCGM_FI_DEV_ECC_DBE_AGG_TOTAL) > 0", "dbe_aggregate"),
        )
    )
    row_remap: str | None = "DCGM_FI_DEV_ROW_REMAP_FAILURE == 1"
    # A GPU whose series existed 5 minutes ago but not now, on a node still reporting others
    # (a node that stopped reporting altogether is an exporter/node problem, not a lost GPU).
    gpu_missing: str | None = (
        f"group by ({GPU_KEYS}) (DCGM_FI_DEV_GPU_TEMP offset 5m)"
        f" unless group by ({GPU_KEYS}) (DCGM_FI_DEV_GPU_TEMP)"
        f" and on ({NODE_KEYS}) group by ({NODE_KEYS}) (DCGM_FI_DEV_GPU_TEMP)"
    )
    infiniband: str | None = " or ".join(
        (
            _tag("node_infiniband_state_id != 4", "link_down"),
            _tag("node_infiniband_physical_state_id != 5", "link_down"),
            _tag(f"increase(node_infiniband_link_downed_total[{COUNTER_WINDOW}]) > 0", "link_flap"),
            _tag("increase(node_infiniband_symbol_error_total[1h]) > 120", "symbol_errors"),
        )
    )

    @classmethod
    def with_windows(
        cls, counters: str = COUNTER_WINDOW, missing: str = "5m", symbol_errors: str = "1h"
    ) -> PrometheusQueries:
        """The defaults with other look-back windows (short ones make tests fast). Fold NVLink
        signals for `counters` too (SignalFolder's `windows`)."""
        base = cls()
        changes: dict[str, Any] = {}
        for name in ("nvlink", "ecc", "gpu_missing", "infiniband"):
            query: str = getattr(base, name)
            query = query.replace(f"[{COUNTER_WINDOW}]", f"[{counters}]").replace(
                "offset 5m", f"offset {missing}"
            )
            changes[name] = query.replace("[1h]", f"[{symbol_errors}]")
        return base.model_copy(update=changes)


class PrometheusSourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    timeout_seconds: float = Field(default=10.0, gt=0)  # for the whole poll, retries included
    retries: int = Field(default=1, ge=0)
    staleness_seconds: float = Field(default=120.0, gt=0)  # DCGM exporter scrapes every 30 s
    # Each named query answers "how old is this exporter's newest sample"; all must be fresh.
    # Fleets with InfiniBand add one for node_exporter, see docs/signals.md.
    freshness: dict[str, str] = Field(
        default_factory=lambda: {"dcgm": "time() - max(timestamp(DCGM_FI_DEV_GPU_TEMP))"},
        min_length=1,
    )
    node_labels: tuple[str, ...] = ("Hostname", "hostname")
    ib_node_label: str = "node"
    # The `problem` label a query attaches → the signal's code (XIDs carry their own).
    problem_codes: dict[str, int] = Field(
        default_factory=lambda: {
            "dbe_volatile": 1,
            "dbe_aggregate": 2,
            "link_down": 1,
            "link_flap": 2,
            "symbol_errors": 3,
        }
    )
    queries: PrometheusQueries = Field(default_factory=PrometheusQueries)


class QueryFailed(Exception):
    """One query could not be answered; the message is the health reason."""


def node_name(labels: Mapping[str, str], candidates: tuple[str, ...]) -> str | None:
    """The first non-empty of the candidate labels: exporters disagree on the node label."""
    for name in candidates:
        value = labels.get(name)
        if value:
            return value
    return None


def gpu_index(labels: Mapping[str, str]) -> int | None:
    raw = labels.get("gpu", "")
    return int(raw) if raw.isdigit() else None


def to_signals(
    kind: SignalKind,
    result: list[dict[str, Any]],
    config: PrometheusSourceConfig,
    source: str,
    now: datetime,
) -> tuple[list[Signal], int]:
    """Turn one query's instant vector into signals; returns them and the number of series
    that could not be attributed to a node (or had no usable value) and were skipped."""
    if kind is SignalKind.INFINIBAND:
        node_labels = (config.ib_node_label, *config.node_labels)
    else:
        node_labels = (*config.node_labels, config.ib_node_label)
    signals: list[Signal] = []
    skipped = 0
    for series in result:
        labels: dict[str, str] = {
            k: str(v) for k, v in series.get("metric", {}).items() if k != "__name__"
        }
        node = node_name(labels, node_labels)
        try:
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            value = math.nan
        if node is None or not math.isfinite(value):
            skipped += 1
            continue
        code: int | None = None
        reading: float | None = value
        if kind is SignalKind.XID:
            code, reading = int(value), None
        elif "problem" in labels:
            code = config.problem_codes.get(labels["problem"])
        try:
            signal = Signal(
                node=node,
                kind=kind,
                source=source,
                observed_at=now,
                gpu=gpu_index(labels),
                gpu_uuid=labels.get("UUID") or None,
                code=code,
                value=reading,
                labels=labels,
            )
        except ValidationError:  # e.g. a node name or GPU index out of Kubernetes' bounds
            skipped += 1
            continue
        signals.append(signal)
    return signals, skipped


class PrometheusSource:
    """Polls Prometheus synchronously (prometheus-api-client is built on requests)."""

    def __init__(self, config: PrometheusSourceConfig, name: str = "prometheus") -> None:
        self.name = name
        self.config = config
        self._health = HealthTracker(name)
        # Retries are immediate and ignore Retry-After: sleeping inside the client would break
        # the poll's time bound, and the next cycle is the natural back-off.
        retry = Retry(
            total=config.retries,
            backoff_factor=0,
            status_forcelist=(408, 429, 500, 502, 503, 504),
            allowed_methods=("GET",),
            respect_retry_after_header=False,
        )
        self._client = PrometheusConnect(url=config.url, retry=retry)

    def close(self) -> None:
        self._client.close()

    def poll(self, now: datetime) -> SourceResult:
        deadline = time.monotonic() + self.config.timeout_seconds
        try:
            ages: dict[str, str] = {}
            snapshot: float | None = None
            for exporter, promql in self.config.freshness.items():
                age, evaluated_at = self._age(promql, exporter, deadline, snapshot)
                snapshot = snapshot if snapshot is not None else evaluated_at
                if age is None:
                    return self._health.down(
                        now, f"no {exporter} samples in Prometheus (freshness query is empty)"
                    )
                ages[f"{exporter}_newest_sample_age_seconds"] = f"{age:.1f}"
                if age > self.config.staleness_seconds:
                    return self._health.down(
                        now,
                        f"{exporter} data is stale: newest sample is {age:.0f}s old "
                        f"(bound {self.config.staleness_seconds:.0f}s)",
                        ages,
                    )
            signals: list[Signal] = []
            skipped = 0
            for kind in SignalKind:
                query = getattr(self.config.queries, kind.value, None)
                if query is None:
                    continue
                answer = self._query(query, kind.value, deadline, snapshot)
                found, dropped = to_signals(kind, answer, self.config, self.name, now)
                signals.extend(found)
                skipped += dropped
        except QueryFailed as exc:
            return self._health.down(now, str(exc))
        detail = {**ages, "signals": str(len(signals))}
        if skipped:
            detail["skipped_series"] = str(skipped)
        return self._health.ok(now, tuple(signals), detail)

    def _age(
        self, query: str, exporter: str, deadline: float, at: float | None
    ) -> tuple[float | None, float | None]:
        """Seconds since the exporter's newest sample (None when it has none at all), and the
        time Prometheus evaluated the query at."""
        ages = []
        evaluated_at: float | None = None
        for series in self._query(query, f"{exporter} freshness", deadline, at):
            try:
                evaluated_at = float(series["value"][0])
                ages.append(float(series["value"][1]))
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        ages = [a for a in ages if not math.isnan(a)]
        return (min(ages) if ages else None), evaluated_at

    def _query(
        self, query: str, what: str, deadline: float, at: float | None = None
    ) -> list[dict[str, Any]]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise QueryFailed(
                f"timed out after {self.config.timeout_seconds:g}s before the {what} query"
            )
        # Each attempt gets its share of what is left, so retries cannot exceed the bound.
        per_attempt = remaining / (self.config.retries + 1)
        try:
            params = {"time": f"{at:.3f}"} if at is not None else None
            result = self._client.custom_query(query, params=params, timeout=per_attempt)
        except PrometheusApiClientException as exc:
            raise QueryFailed(f"{what} query failed: {_shorten(str(exc))}") from exc
        except requests.RequestException as exc:
            raise QueryFailed(
                f"Prometheus unreachable at {self.config.url} ({what} query): "
                f"{type(exc).__name__}: {_shorten(str(exc))}"
            ) from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise QueryFailed(f"{what} query: malformed response: {_shorten(str(exc))}") from exc
        if not isinstance(result, list) or not all(isinstance(s, dict) for s in result):
            raise QueryFailed(f"{what} query: the answer is not an instant vector")
        return result


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
