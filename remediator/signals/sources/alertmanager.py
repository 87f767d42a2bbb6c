"""Alertmanager webhook (payload version "4") → signals.

Which signal an alert is comes from its labels, through a configurable mapping: an explicit
kind label on the alerting rule wins, else the alert name. Resolved alerts carry no fault, so
they yield no signals (a signal means "seen now"; absence is how a condition ends). Alerts the
mapping does not know are ignored and reported back, since one Alertmanager group may mix them
with ours. A payload that is not version 4 or is malformed is rejected as a whole, with reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from remediator.signals.model import Signal, SignalKind
from remediator.signals.xid import parse_kernel_line

SUPPORTED_VERSION = "4"


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
    startsAt: AwareDatetime
    endsAt: datetime  # 0001-01-01T00:00:00Z while firing
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
    groupKey: str = ""
    truncatedAlerts: int = 0


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
    # Kernel-log lines (node-problem-detector style) where an XID code can be read.
    message_fields: tuple[str, ...] = ("message", "description", "summary")


@dataclass(frozen=True, slots=True)
class AlertBatch:
    signals: tuple[Signal, ...]
    resolved: int
    ignored: tuple[str, ...]  # why each firing alert yielded no signal


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
        raise PayloadError(
            [
                f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"
                for err in exc.errors()
            ]
        ) from exc


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
    try:
        return Signal(
            node=node,
            kind=kind,
            source=source,
            observed_at=now,
            gpu=gpu,
            gpu_uuid=_first((labels,), mapping.uuid_labels),
            code=code,
            value=_float(_first((labels, annotations), mapping.value_fields)),
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
    signals: list[Signal] = []
    ignored: list[str] = []
    resolved = 0
    for alert in webhook.alerts:
        outcome = map_alert(alert, mapping, now, source)
        if outcome is None:
            resolved += 1
        elif isinstance(outcome, str):
            ignored.append(outcome)
        else:
            signals.append(outcome)
    return AlertBatch(tuple(signals), resolved, tuple(ignored))
