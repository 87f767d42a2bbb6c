"""The evidence bundle a vendor asks for with an RMA: the hardware's identity (serials and
versions), where it sat when (placements), the kernel's XID lines, the DCGM diagnostics that
failed (rma/diagnostics.py) and the remediation timelines. Built once when the case opens and
kept on it, so the evidence survives the node (a replaced machine's history is gone from the
cluster); pure: values in, values out.

The webhook gets it as JSON; the console hands it out as one tar.gz with a file per part."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from remediator.rma.diagnostics import failing_runs
from remediator.signals.model import Signal
from remediator.store.records import RemediationRecord

# The archive's files, in order; each part of the bundle has one.
PARTS: dict[str, str] = {
    "case": "case.json",
    "hardware": "hardware.json",
    "placements": "placements.json",
    "xid": "xid.log",
    "diagnostics": "dcgm-diagnostics.json",
    "timelines": "timelines.json",
}
# Labels the exporters and the agent put on a signal that identify the GPU and its software.
IDENTITY_LABELS = (
    "UUID",
    "serial",
    "modelName",
    "pci_bus_id",
    "vbios_version",
    "driver_version",
    "DCGM_FI_DRIVER_VERSION",
    "Hostname",
    "dmi_serial",
)
# The agent's names for the same (agent/report.py), reported under the names above.
AGENT_LABELS = {
    "gpu_serial": "serial",
    "vbios": "vbios_version",
    "driver": "driver_version",
    "pci": "pci_bus_id",
}


@dataclass(frozen=True)
class Hardware:
    """What the ledger knows of the GPU or machine at fault; empty when it knows nothing."""

    facts: Mapping[str, Any] = field(default_factory=dict)
    placements: Sequence[Mapping[str, Any]] = ()


def xid_line(signal: Signal) -> str:
    """The kernel's own line when the source read one (the agent's `line`), as
    `journalctl -k -o short-iso` prints it: `TIME NODE kernel: NVRM: Xid (PCI:…): 79, …`. A
    signal without one (DCGM exporter's) is its facts, never dressed up as a kernel line."""
    at = f"{signal.observed_at.isoformat()} {signal.node}"
    line = signal.labels.get("line")
    if line:
        return f"{at} kernel: {line}"
    gpu = "" if signal.gpu is None else f" gpu={signal.gpu}"
    uuid = "" if signal.gpu_uuid is None else f" uuid={signal.gpu_uuid}"
    message = signal.labels.get("message") or signal.labels.get("err_msg")
    text = f": {message}" if message else ""
    return f"{at} {signal.kind.value} {signal.code}{gpu}{uuid} source={signal.source}{text}"


def _signal_identity(signals: Iterable[Signal], gpu_index: int | None) -> dict[str, str]:
    found: dict[str, str] = {}
    for signal in signals:
        if gpu_index is not None and signal.gpu not in (None, gpu_index):
            continue
        if signal.gpu_uuid and "uuid" not in found:
            found["uuid"] = signal.gpu_uuid
        named = [(label, label) for label in IDENTITY_LABELS] + list(AGENT_LABELS.items())
        for label, name in named:
            value = signal.labels.get(label)
            if value and name not in found:
                found[name] = value
    return found


def _timeline(record: RemediationRecord) -> dict[str, Any]:
    return {
        "remediation_id": record.id,
        "cluster": record.cluster,
        "node": record.node,
        "policy": record.policy,
        "state": record.state.value,
        "reason": record.reason,
        "created_at": record.created_at.isoformat(),
        "events": [
            {
                "at": e.at.isoformat(),
                "from": e.from_state.value if e.from_state else None,
                "to": e.to_state.value if e.to_state else None,
                "action": e.action,
                "actor": e.actor,
                "detail": dict(e.detail),
            }
            for e in record.events
        ],
    }


def build(
    *,
    case: Mapping[str, Any],
    hardware: Hardware,
    remediations: Sequence[RemediationRecord],
    gpu_index: int | None,
    built_at: datetime,
) -> dict[str, Any]:
    """The bundle as JSON: every part present (an empty list says "none recorded")."""
    signals = [s for r in remediations for s in r.signals]
    xids = sorted(
        (s for s in signals if s.kind.value == "xid" or s.kind.value == "sxid"),
        key=lambda s: s.observed_at,
    )
    gpu_uuid = str(case.get("hardware_id")) if case.get("target") == "gpu" else None
    return {
        "format": "remediator-rma-bundle/1",
        "built_at": built_at.isoformat(),
        "case": dict(case),
        "hardware": {
            "ledger": dict(hardware.facts),
            "reported_by_signals": _signal_identity(signals, gpu_index),
        },
        "placements": [dict(p) for p in hardware.placements],
        "xid": [xid_line(s) for s in xids],
        "diagnostics": failing_runs(remediations, gpu_uuid, gpu_index),
        "timelines": [_timeline(r) for r in remediations],
    }


def archive(bundle: Mapping[str, Any]) -> bytes:
    """One tar.gz, a file per part, with fixed times so the same bundle is the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for part, name in PARTS.items():
            value = bundle.get(part)
            if part == "xid":
                text = "".join(f"{line}\n" for line in value or ())
            else:
                text = json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"
            data = text.encode()
            info = tarfile.TarInfo(f"rma-{bundle['case'].get('id', 'case')}/{name}")
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
