"""Prometheus source: DCGM exporter and node_exporter InfiniBand series → signals.

One PromQL query per signal kind per cycle, whatever the fleet size, plus freshness queries
first: if the exporter's newest sample is older than the staleness bound (or there is none),
Prometheus is answering about the past, so the source reports itself down instead of "healthy".
Any failed query also makes the whole poll down: a partial answer would read as "no XIDs".
Every kind is queried at the evaluation time of the first freshness answer, so one poll is one
snapshot: a scrape landing between two queries cannot show a GPU off the bus as "missing" before
its XID 79 is visible.

The source asks only for what the loaded policies could act on (`set_interest`, see
signals/interest.py): kinds no policy matches are not queried, and readings below every level
stay in Prometheus. With answers that small, emptiness says nothing about coverage any more, so
one more query counts each kind's series and ages its newest sample.

Readings carry their sample's own timestamp, not the poll's: a sample seen before is not read
again (it cannot extend a streak), and one older than `sample_max_age_seconds` (kept shorter than
every policy's `for`) is not a reading at all — after a Prometheus restart its last samples look
current to an instant query for five minutes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import UTC, datetime
from typing import Any

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from pydantic import BaseModel, ConfigDict, Field
from urllib3.util.retry import Retry

from remediator.signals import bounds
from remediator.signals.dedup import COUNTER_WINDOW as FOLD_COUNTER_WINDOW
from remediator.signals.interest import EVERYTHING, Interest, ReadingFilter
from remediator.signals.maintenance import (
    ROW_REMAP_PENDING,
    MaintenanceBook,
    MaintenanceEvent,
    MaintenanceOrigin,
)
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import HealthTracker, SourceResult

GPU_KEYS = "Hostname, hostname, gpu, UUID"
NODE_KEYS = "Hostname, hostname"
NVLINK_COUNTERS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
# The look-back of the counter queries: the NVLink fold window, so that one burst is one event
# (see signals/dedup.py). Two minutes are four DCGM scrapes: one missed scrape hides nothing.
COUNTER_WINDOW = f"{int(FOLD_COUNTER_WINDOW.total_seconds())}s"
# DCGM's per-link NVLink error counters (links 0-17; dcgm_fields.h), and the step their
# increase is sampled at: a subquery, since the link number is read from the metric name.
NVLINK_PER_LINK = "DCGM_FI_DEV_NVLINK_(CRC_FLIT|CRC_DATA|REPLAY|RECOVERY)_ERROR_COUNT_L[0-9]+"
PER_LINK_STEP = "5s"
# A link's state (DCGM field 1508, a link entity; renamed LINK_STATUS in newer DCGM): 0 is down.
# Its link label is taken as dcgm-exporter's `nvlink` (not checked against a real exporter).
NVLINK_STATE = "DCGM_FI_DEV_NVLINK_(GET_STATE|LINK_STATUS)"


def _tag(expr: str, problem: str) -> str:
    """Mark a sub-query's series with a `problem` label, which the source maps to a code."""
    return f'label_replace({expr}, "problem", "{problem}", "", "")'


class PrometheusQueries(BaseModel):
    """PromQL per signal kind; None turns a kind off. Every query returns an instant vector
    whose series carry a node label (and `gpu` for GPU kinds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    xid: str | None = "DCGM_FI_DEV_XID_ERRORS != 0"
    thermal: str | None = "DCGM_FI_DEV_GPU_TEMP"
    # A link that is down (code 1, `link_down`, value 1) whatever its counters say. Errors per
    # link where the exporter has DCGM's per-link fields (`DCGM_FI_DEV_NVLINK_<C>_ERROR_
    # COUNT_L<n>`, NVLink domains' trays): each link a signal with a `link` label, so a failing
    # link names its GPU and link. Elsewhere the GPU's totals, one signal per GPU. Each counter
    # is tagged before the sum: increase() drops the metric name, and several series with one
    # label set in a vector is an execution error in PromQL.
    nvlink: str | None = (
        f"(sum by ({GPU_KEYS}, link) (increase(label_replace(label_replace("
        f'{{__name__=~"{NVLINK_PER_LINK}"}}, "link", "$1", "__name__", ".*_L([0-9]+)$"),'
        f' "counter", "$1", "__name__", "DCGM_FI_DEV_NVLINK_(.+)_ERROR_COUNT_L[0-9]+")'
        f"[{COUNTER_WINDOW}:{PER_LINK_STEP}]))"
        f" or (sum by ({GPU_KEYS}) ("
        + " or ".join(
            f"label_replace(increase(DCGM_FI_DEV_NVLINK_{c}_ERROR_COUNT_TOTAL[{COUNTER_WINDOW}]),"
            f' "counter", "{c.lower()}", "", "")'
            for c in NVLINK_COUNTERS
        )
        + f') unless on ({GPU_KEYS}) group by ({GPU_KEYS}) ({{__name__=~"{NVLINK_PER_LINK}"}})'
        + ") or "
        + _tag(
            f'label_replace(min by ({GPU_KEYS}, nvlink) ({{__name__=~"{NVLINK_STATE}"}})'
            ' == bool 0, "link", "$1", "nvlink", "(.+)")',
            "link_down",
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
    # Rows remapped but waiting for a GPU reset to take effect: a maintenance event per GPU,
    # which the reset ends (signals/maintenance.py).
    maintenance: str | None = "DCGM_FI_DEV_ROW_REMAP_PENDING != 0"
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
            query = query.replace(f"[{COUNTER_WINDOW}]", f"[{counters}]")
            query = query.replace(f"[{COUNTER_WINDOW}:", f"[{counters}:").replace(
                "offset 5m", f"offset {missing}"
            )
            changes[name] = query.replace("[1h]", f"[{symbol_errors}]")
        return base.model_copy(update=changes)


# The metric whose series say whether a kind is covered at all (count) and how fresh it is.
KIND_METRICS: dict[str, str] = {
    "xid": "DCGM_FI_DEV_XID_ERRORS",
    "thermal": "DCGM_FI_DEV_GPU_TEMP",
    "nvlink": "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "ecc": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "row_remap": "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "maintenance": "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "infiniband": "node_infiniband_state_id",
}
# Reading kinds: their query is a gauge read as is, so the answer can be narrowed to what
# policies act on and each reading carries its sample's timestamp.
READING_QUERY_KINDS = frozenset({SignalKind.THERMAL})
MAX_UUID = 128  # Signal.gpu_uuid's bound
FIELD = "remediator_field"  # marks a reading query's value and timestamp halves


class PrometheusSourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    timeout_seconds: float = Field(default=10.0, gt=0)  # for the whole poll, retries included
    retries: int = Field(default=1, ge=0)
    staleness_seconds: float = Field(default=120.0, gt=0)  # DCGM exporter scrapes every 30 s
    # A reading whose sample is older is not a reading (two and a half 30 s scrapes); the
    # source also keeps it under ¾ of the shortest `for` of the kind's policies.
    sample_max_age_seconds: float = Field(default=75.0, gt=0)
    # Each named query answers "how old is this exporter's newest sample"; all must be fresh.
    # Fleets with InfiniBand add one for node_exporter, see docs/signals.md.
    freshness: dict[str, str] = Field(
        default_factory=lambda: {"dcgm": "time() - max(timestamp(DCGM_FI_DEV_GPU_TEMP))"},
        min_length=1,
    )
    # Per kind, the metric counted and aged in the coverage query; a kind not named is not
    # checked. A kind with series whose newest sample is stale makes the source down.
    kind_metrics: dict[str, str] = Field(default_factory=lambda: dict(KIND_METRICS))
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


_SIGNAL_FIELDS = frozenset(Signal.model_fields)
_new = object.__new__
_set = object.__setattr__


def checked_signal(values: dict[str, Any]) -> Signal:
    """A Signal from values this module has checked, without a validation pass: what
    `model_construct` does, minus its per-field loop (a third of the cost). Should the model
    gain a field this module does not fill, it validates instead of building a partial object."""
    if values.keys() != _SIGNAL_FIELDS:
        return Signal.model_validate(values)
    signal = _new(Signal)
    _set(signal, "__dict__", values)
    _set(signal, "__pydantic_fields_set__", set(_SIGNAL_FIELDS))
    _set(signal, "__pydantic_extra__", None)
    _set(signal, "__pydantic_private__", None)
    return signal


class NodeNames:
    """Node names checked once each (signals/bounds.py), not once per reading: an answer holds
    a few thousand nodes at most, but eight or more readings per node."""

    def __init__(self, limit: int = 100_000) -> None:
        self._verdicts: dict[str, str | None] = {}
        self._limit = limit

    def problem(self, node: str) -> str | None:
        if node in self._verdicts:
            return self._verdicts[node]
        verdict = bounds.node_name_problem(node)
        if len(self._verdicts) >= self._limit:
            self._verdicts.clear()
        self._verdicts[node] = verdict
        return verdict


_NODE_NAMES = NodeNames()


@dataclass
class Mapped:
    """One answer as signals, and what was left out and why."""

    signals: list[Signal] = dc_field(default_factory=list)
    skipped: int = 0
    stale: int = 0
    seen: int = 0  # readings whose sample an earlier poll already read
    reasons: list[str] = dc_field(default_factory=list)

    def refuse(self, reason: str) -> None:
        self.skipped += 1
        if len(self.reasons) < 3:
            self.reasons.append(reason)


def _value(series: Mapping[str, Any]) -> float:
    try:
        return float(series["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return math.nan


def _labels(series: Mapping[str, Any]) -> dict[str, str]:
    metric = series.get("metric")
    if not isinstance(metric, dict):
        return {}
    labels = dict(metric)  # Prometheus sends label values as strings: copy, convert only if not
    labels.pop("__name__", None)
    labels.pop(FIELD, None)
    try:
        "".join(labels.values())  # the cheapest "all strings" test: C speed, no generator
    except TypeError:
        return {str(k): str(v) for k, v in labels.items()}
    return labels


def _build(
    kind: SignalKind,
    labels: dict[str, str],
    value: float,
    observed_at: datetime,
    config: PrometheusSourceConfig,
    source: str,
    out: Mapped,
    names: NodeNames,
) -> None:
    """Check one series at the edge and construct its signal without a validation pass: every
    field is typed here, and the node name was checked once per answer (NodeNames)."""
    node_labels = (
        (config.ib_node_label, *config.node_labels)
        if kind is SignalKind.INFINIBAND
        else (*config.node_labels, config.ib_node_label)
    )
    node = node_name(labels, node_labels)
    if node is None:
        out.refuse(f"{kind.value}: a series without a node label")
        return
    if not math.isfinite(value):
        out.refuse(f"{kind.value} on {node[:64]}: value {value} is not a finite number")
        return
    problem = names.problem(node)
    if problem is not None:
        out.refuse(f"{kind.value}: {problem}")
        return
    raw_gpu = labels.get("gpu", "")
    gpu = int(raw_gpu) if raw_gpu.isdigit() else None
    code: int | None = None
    reading: float | None = value
    if kind is SignalKind.XID:
        if value != int(value):
            out.refuse(f"xid on {node}: code {value:g} is not a whole number")
            return
        code, reading = int(value), None
    elif "problem" in labels:
        code = config.problem_codes.get(labels["problem"])
    uuid = labels.get("UUID") or None
    problem = (
        bounds.gpu_problem(gpu)
        or bounds.code_problem(kind, code)
        or bounds.value_problem(kind, reading)
        or (f"GPU UUID longer than {MAX_UUID}" if uuid and len(uuid) > MAX_UUID else None)
    )
    if problem is not None:
        out.refuse(f"{kind.value} on {node}: {problem}")
        return
    out.signals.append(
        checked_signal(
            {
                "node": node,
                "kind": kind,
                "source": source,
                "observed_at": observed_at,
                "gpu": gpu,
                "gpu_uuid": uuid,
                "code": code,
                "value": reading,
                "since": None,
                "labels": labels,
            }
        )
    )


def to_signals(
    kind: SignalKind,
    result: list[dict[str, Any]],
    config: PrometheusSourceConfig,
    source: str,
    now: datetime,
) -> tuple[list[Signal], int]:
    """Turn one query's instant vector into signals observed at `now`; returns them and the
    number of series refused (no node, no finite value in range, a name or GPU index out of
    Kubernetes' bounds)."""
    out = Mapped()
    for series in result:
        _build(kind, _labels(series), _value(series), now, config, source, out, _NODE_NAMES)
    return out.signals, out.skipped


def row_remaps_pending(
    result: list[dict[str, Any]], config: PrometheusSourceConfig, out: Mapped
) -> list[MaintenanceEvent]:
    """`DCGM_FI_DEV_ROW_REMAP_PENDING` series → one maintenance event per GPU, named by the GPU's
    UUID when the exporter gives it (a swapped GPU is another event), else node and index."""
    events: list[MaintenanceEvent] = []
    for series in result:
        labels = _labels(series)
        node = node_name(labels, config.node_labels)
        gpu = gpu_index(labels)
        if node is None or gpu is None:
            out.refuse("maintenance: a row-remap-pending series without a node or GPU label")
            continue
        problem = _NODE_NAMES.problem(node) or bounds.gpu_problem(gpu)
        if problem is not None:
            out.refuse(f"maintenance: {problem}")
            continue
        gpu_id = labels.get("UUID") or f"{node}/gpu{gpu}"
        try:
            events.append(
                MaintenanceEvent(
                    event_id=f"{gpu_id}/{ROW_REMAP_PENDING}",
                    code=ROW_REMAP_PENDING,
                    origin=MaintenanceOrigin.DCGM,
                    instance_id=gpu_id,
                    node=node,
                    gpu=gpu,
                    description=f"GPU {gpu}: rows remapped, pending a GPU reset",
                )
            )
        except ValueError as exc:
            out.refuse(f"maintenance on {node}: {exc}")
    return events


def reading_query(query: str, narrowed: ReadingFilter | None) -> str:
    """The reading's value and its sample's timestamp in one answer (told apart by FIELD),
    narrowed to the series a policy could act on."""
    values, stamps = query, f"timestamp({query})"
    if narrowed is not None:
        kept = narrowed.condition(query)  # by the values, for both halves
        values, stamps = f"({values}) and ({kept})", f"({stamps}) and ({kept})"
    return (
        f'label_replace({values}, "{FIELD}", "value", "", "")'
        f' or label_replace({stamps}, "{FIELD}", "timestamp", "", "")'
    )


SeriesKey = frozenset[tuple[str, str]]


def to_readings(
    kind: SignalKind,
    result: list[dict[str, Any]],
    config: PrometheusSourceConfig,
    source: str,
    *,
    evaluated_at: float,
    max_age: float,
    seen: Mapping[SeriesKey, float],
) -> tuple[Mapped, dict[SeriesKey, float]]:
    """A reading query's answer → readings observed at their sample's time. Samples older than
    `max_age` and samples already in `seen` are left out; returns the new `seen`."""
    values: dict[SeriesKey, tuple[dict[str, str], float]] = {}
    stamps: dict[SeriesKey, float] = {}
    for series in result:
        labels = _labels(series)
        key = frozenset(labels.items())
        metric = series.get("metric")
        part = metric.get(FIELD) if isinstance(metric, dict) else None
        if part == "timestamp":
            stamps[key] = _value(series)
        else:
            values[key] = (labels, _value(series))
    out = Mapped()
    now_seen: dict[SeriesKey, float] = {}
    for key, (labels, value) in values.items():
        stamp = stamps.get(key, evaluated_at)
        if not math.isfinite(stamp):
            stamp = evaluated_at
        now_seen[key] = stamp
        if evaluated_at - stamp > max_age:
            out.stale += 1
            continue
        if seen.get(key) == stamp:
            out.seen += 1
            continue
        observed = datetime.fromtimestamp(stamp, UTC)
        _build(kind, labels, value, observed, config, source, out, _NODE_NAMES)
    return out, now_seen


class PrometheusSource:
    """Polls Prometheus synchronously (prometheus-api-client is built on requests)."""

    def __init__(
        self,
        config: PrometheusSourceConfig,
        name: str = "prometheus",
        interest: Interest = EVERYTHING,
    ) -> None:
        self.name = name
        self.config = config
        self._health = HealthTracker(name)
        self._interest = interest
        self._seen: dict[SignalKind, dict[SeriesKey, float]] = {}
        self._row_remaps = MaintenanceBook(name)
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

    @property
    def interest(self) -> Interest:
        return self._interest

    def set_interest(self, interest: Interest) -> None:
        """Ask for what this policy set could act on from the next poll on."""
        self._interest = interest

    def close(self) -> None:
        self._client.close()

    def max_sample_age(self, kind: SignalKind) -> float:
        """The configured bound, kept under the shortest `for` of the kind's policies."""
        bound = self.config.sample_max_age_seconds
        shortest = self._interest.shortest_for.get(kind)
        if shortest is not None:
            bound = min(bound, 0.75 * shortest.total_seconds())
        return bound

    def poll(self, now: datetime) -> SourceResult:
        deadline = time.monotonic() + self.config.timeout_seconds
        interest = self._interest
        kinds = [
            kind
            for kind in SignalKind
            if getattr(self.config.queries, kind.value, None) is not None and interest.wants(kind)
        ]
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
            stale_kind = self._coverage(kinds, deadline, snapshot, ages)
            if stale_kind is not None:
                return self._health.down(now, stale_kind, ages)
            mapped = Mapped()
            pending: list[MaintenanceEvent] | None = None
            for kind in kinds:
                query: str = getattr(self.config.queries, kind.value)
                if kind is SignalKind.MAINTENANCE:
                    found = Mapped()
                    answer = self._query(query, kind.value, deadline, snapshot)
                    pending = row_remaps_pending(answer, self.config, found)
                elif kind in READING_QUERY_KINDS:
                    narrowed = interest.readings.get(kind)
                    answer = self._query(
                        reading_query(query, narrowed), kind.value, deadline, snapshot
                    )
                    found, self._seen[kind] = to_readings(
                        kind,
                        answer,
                        self.config,
                        self.name,
                        evaluated_at=snapshot if snapshot is not None else now.timestamp(),
                        max_age=self.max_sample_age(kind),
                        seen=self._seen.get(kind, {}),
                    )
                else:
                    answer = self._query(query, kind.value, deadline, snapshot)
                    found = Mapped()
                    for series in answer:
                        _build(
                            kind,
                            _labels(series),
                            _value(series),
                            now,
                            self.config,
                            self.name,
                            found,
                            _NODE_NAMES,
                        )
                mapped.signals.extend(found.signals)
                mapped.skipped += found.skipped
                mapped.stale += found.stale
                mapped.seen += found.seen
                mapped.reasons.extend(found.reasons[: 3 - len(mapped.reasons)])
        except QueryFailed as exc:
            return self._health.down(now, str(exc))
        if pending is not None:
            # Only a complete poll may end an event: a reset cleared the GPU's pending remap.
            mapped.signals.extend(self._row_remaps.update(pending, now))
        detail = {**ages, "signals": str(len(mapped.signals))}
        if mapped.skipped:
            detail["skipped_series"] = str(mapped.skipped)
            detail["refused"] = "; ".join(mapped.reasons)
        if mapped.stale:
            detail["stale_readings"] = str(mapped.stale)
        return self._health.ok(now, tuple(mapped.signals), detail)

    def _coverage(
        self, kinds: list[SignalKind], deadline: float, at: float | None, detail: dict[str, str]
    ) -> str | None:
        """Count each queried kind's series and age its newest sample in one query; returns
        the reason to be down when a kind that has series went stale."""
        named = self.config.kind_metrics
        metrics = {k.value: named[k.value] for k in kinds if named.get(k.value)}
        if not metrics:
            return None
        parts = []
        for kind, metric in metrics.items():
            for measure, expr in (
                ("series", f"count({metric})"),
                ("age", f"time() - max(timestamp({metric}))"),
            ):
                tagged = f'label_replace({expr}, "kind", "{kind}", "", "")'
                parts.append(f'label_replace({tagged}, "measure", "{measure}", "", "")')
        found: dict[tuple[str, str], float] = {}
        for series in self._query(" or ".join(parts), "coverage", deadline, at):
            labels = series.get("metric") or {}
            found[(str(labels.get("kind")), str(labels.get("measure")))] = _value(series)
        problem: str | None = None
        for kind in metrics:
            count = found.get((kind, "series"), 0.0)
            detail[f"{kind}_series"] = f"{count:.0f}"
            age = found.get((kind, "age"))
            if age is None or not math.isfinite(age):
                continue
            detail[f"{kind}_newest_sample_age_seconds"] = f"{age:.1f}"
            if age > self.config.staleness_seconds and problem is None:
                problem = (
                    f"{kind} data is stale: newest {metrics[kind]} sample is {age:.0f}s old "
                    f"(bound {self.config.staleness_seconds:.0f}s)"
                )
        return problem

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
