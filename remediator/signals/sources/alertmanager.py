"""Alertmanager webhook (payload version "4") → signals.

Which signal an alert is comes from its labels, through a configurable mapping: an explicit
kind label on the alerting rule wins, else the alert name. Alerts the mapping does not know, or
whose labels are out of bounds, are ignored and reported back one by one (one Alertmanager group
may mix them with ours); a payload that is not version 4 or is malformed is rejected as a whole.

An alert is a state, not a reading: it holds from `startsAt` while it fires and ends when it is
resolved. So its signal carries `since` — `startsAt`, less the rule's own `for` when the alert
says it (a `for` annotation: Prometheus sets `startsAt` when the rule starts firing, after `for`)
— and threshold policies count their `for` from there. Alertmanager notifies once per group and
re-sends only every `repeat_interval` (4 h by default), so `FiringAlerts` (alert_state.py) keeps
each firing alert and re-announces it every cycle until the resolved notification comes. An alert
without a value is a breach at the policy's trigger level: the rule already judged the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from remediator.errors import validation_problems
from remediator.signals.model import Signal, SignalKind
from remediator.signals.wire import Number, WireNaiveTime, WireTime
from remediator.signals.xid import parse_kernel_line

SUPPORTED_VERSION = "4"
MAX_RULE_FOR = timedelta(days=7)


class PayloadError(ValueError):
    """The webhook body was refused; `reasons` says why, one line per problem."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


class Alert(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: WireTime
    endsAt: WireNaiveTime  # 0001-01-01T00:00:00Z while firing
    generatorURL: str = ""
    fingerprint: str = ""


class Webhook(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    version: Literal["4"]
    receiver: str
    status: Literal["firing", "resolved"]
    alerts: list[Alert]
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    # Alertmanager always sends the group's key (`{}:{alertname="…"}`, notify/webhook): an
    # empty one is not from Alertmanager.
    groupKey: str = Field(min_length=1)
    # A uint64; older Alertmanagers leave it out.
    truncatedAlerts: Annotated[int, Number] = Field(default=0, ge=0)


class AlertMapping(BaseModel):
    """How alert labels become signal fields; the first label present wins in each list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind_label: str = "remediator_kind"
    alertnames: dict[str, SignalKind] = Field(
        default_factory=lambda: {
            "GPUXidError": SignalKind.XID,
            "GPUFellOffTheBus": SignalKind.XID,
            "GPUHighTemperature": SignalKind.THERMAL,
            "GPUNVLinkErrors": SignalKind.NVLINK,
            "GPUDoubleBitECCError": SignalKind.ECC,
            "GPURowRemapFailure": SignalKind.ROW_REMAP,
            "GPUMissing": SignalKind.GPU_MISSING,
            "InfiniBandLinkDown": SignalKind.INFINIBAND,
            "InfiniBandSymbolErrors": SignalKind.INFINIBAND,
            "NodeProblem": SignalKind.NODE_CONDITION,
        }
    )
    # A fixed code per alert name, for alerts whose name already says it (XID 79).
    alertname_codes: dict[str, int] = Field(default_factory=lambda: {"GPUFellOffTheBus": 79})
    node_labels: tuple[str, ...] = ("node", "Hostname", "hostname", "kubernetes_node", "nodename")
    gpu_labels: tuple[str, ...] = ("gpu",)
    uuid_labels: tuple[str, ...] = ("UUID", "uuid")
    code_labels: tuple[str, ...] = ("xid", "err_code", "code")
    value_fields: tuple[str, ...] = ("value",)  # looked up in labels, then annotations
    # The rule's own `for` (a Prometheus duration such as "2m"), looked up in annotations then
    # labels: the breach began that long before `startsAt`.
    for_fields: tuple[str, ...] = ("for", "remediator_for")
    # Kernel-log lines (node-problem-detector style) where an XID code can be read.
    message_fields: tuple[str, ...] = ("message", "description", "summary")


@dataclass(frozen=True, slots=True)
class AlertBatch:
    firing: tuple[tuple[str, Signal], ...]  # (alert key, its signal)
    resolved_keys: tuple[str, ...]
    ignored: tuple[str, ...]  # why each firing alert yielded no signal

    @property
    def signals(self) -> tuple[Signal, ...]:
        return tuple(signal for _, signal in self.firing)

    @property
    def resolved(self) -> int:
        return len(self.resolved_keys)


def alert_key(alert: Alert) -> str:
    """Alertmanager's fingerprint when it sends one, else the label set (what it hashes)."""
    if alert.fingerprint:
        return alert.fingerprint
    return ",".join(f"{k}={v}" for k, v in sorted(alert.labels.items()))


_PROM_DURATION = re.compile(
    r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?"
)
_UNITS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def prometheus_duration(text: str) -> timedelta | None:
    """A Prometheus duration ("2m", "1h30m", "90s"); None when `text` is not one."""
    found = _PROM_DURATION.fullmatch(text.strip())
    if found is None or not any(found.groups()):
        return None
    seconds = sum(int(n) * unit for n, unit in zip(found.groups(), _UNITS, strict=True) if n)
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        return None


def parse_webhook(payload: Any) -> Webhook:
    """Validate a decoded JSON body; raises PayloadError with one reason per problem."""
    if not isinstance(payload, dict):
        raise PayloadError(["body must be a JSON object (Alertmanager webhook payload)"])
    version = payload.get("version")
    if version != SUPPORTED_VERSION:
        raise PayloadError(
            [f"unsupported webhook payload version {version!r}; expected {SUPPORTED_VERSION!r}"]
        )
    try:
        return Webhook.model_validate(payload)
    except ValidationError as exc:
        raise PayloadError(validation_problems(exc)) from exc


def _first(sources: tuple[dict[str, str], ...], names: tuple[str, ...]) -> str | None:
    for name in names:
        for source in sources:
            value = source.get(name)
            if value:
                return value
    return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.strip())
    except ValueError:
        return None


def map_alert(
    alert: Alert, mapping: AlertMapping, now: datetime, source: str
) -> Signal | str | None:
    """A firing alert → a Signal, or a reason string when it cannot be one; None if resolved."""
    if alert.status == "resolved":
        return None
    labels, annotations = alert.labels, alert.annotations
    name = labels.get("alertname", "")
    tag = f"alert {name or '?'} ({alert.fingerprint or 'no fingerprint'})"
    raw_kind = labels.get(mapping.kind_label)
    if raw_kind is not None:
        try:
            kind = SignalKind(raw_kind)
        except ValueError:
            return f"{tag}: unknown {mapping.kind_label} {raw_kind!r}"
    elif name in mapping.alertnames:
        kind = mapping.alertnames[name]
    else:
        return f"{tag}: not mapped to a signal kind"
    node = _first((labels,), mapping.node_labels)
    if node is None:
        return f"{tag}: no node label (looked for {', '.join(mapping.node_labels)})"
    gpu_text = _first((labels,), mapping.gpu_labels)
    gpu = _int(gpu_text)
    if gpu_text is not None and (gpu is None or gpu < 0):
        return f"{tag}: gpu label {gpu_text!r} is not a GPU index"
    code = mapping.alertname_codes.get(name)
    if code is None:
        code = _int(_first((labels,), mapping.code_labels))
    extra: dict[str, str] = {}
    if code is None and kind is SignalKind.XID:
        for field in mapping.message_fields:
            parsed = parse_kernel_line(annotations.get(field, "") or labels.get(field, ""))
            if parsed is not None:
                code = parsed.code
                extra = {"pci": parsed.pci, "kernel_message": parsed.message}
                break
        else:
            return f"{tag}: xid alert without an XID code (labels {', '.join(mapping.code_labels)})"
    if kind is SignalKind.NODE_CONDITION and code is None:
        code = 1
    value_text = _first((labels, annotations), mapping.value_fields)
    value = _float(value_text)
    if value_text is not None and value is None:
        return f"{tag}: value {value_text[:40]!r} is not a number"
    since = alert.startsAt
    for_text = _first((annotations, labels), mapping.for_fields)
    if for_text is not None:
        rule_for = prometheus_duration(for_text)
        if rule_for is None or rule_for > MAX_RULE_FOR:
            return (
                f"{tag}: {for_text[:40]!r} is not a Prometheus duration of at most "
                f"{MAX_RULE_FOR.days} days (the rule's for)"
            )
        try:
            since -= rule_for
        except OverflowError:
            return f"{tag}: startsAt less the rule's for ({for_text}) is out of range"
    try:
        return Signal(
            node=node,
            kind=kind,
            source=source,
            observed_at=now,
            gpu=gpu,
            gpu_uuid=_first((labels,), mapping.uuid_labels),
            code=code,
            value=value,
            since=min(since, now),  # a sender's clock ahead of ours must not make it future
            labels={
                **labels,
                **extra,
                "alert_fingerprint": alert.fingerprint,
                "alert_starts_at": alert.startsAt.isoformat(),
            },
        )
    except ValidationError as exc:
        return f"{tag}: {'; '.join(err['msg'] for err in exc.errors())}"


def map_webhook(
    webhook: Webhook, mapping: AlertMapping, now: datetime, source: str = "alertmanager"
) -> AlertBatch:
    return map_alerts(webhook.alerts, mapping, now, source)


def map_alerts(
    alerts: Iterable[Alert], mapping: AlertMapping, now: datetime, source: str = "alertmanager"
) -> AlertBatch:
    firing: list[tuple[str, Signal]] = []
    ignored: list[str] = []
    resolved: list[str] = []
    for alert in alerts:
        outcome = map_alert(alert, mapping, now, source)
        if outcome is None:
            resolved.append(alert_key(alert))
        elif isinstance(outcome, str):
            ignored.append(outcome)
        else:
            firing.append((alert_key(alert), outcome))
    return AlertBatch(tuple(firing), tuple(resolved), tuple(ignored))
