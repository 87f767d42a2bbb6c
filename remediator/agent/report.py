"""What the agent reports, as the push API's JSON: pure, so the tests pin the shapes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from remediator.agent.gpus import GpuInfo
from remediator.signals.xid import KernelXid

SOURCE = "agent"
MAX_GPU_INDEX = 1023
MAX_LABEL = 200


def _gpu_fields(gpu: GpuInfo | None, uuid: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if gpu is not None and gpu.index is not None and gpu.index <= MAX_GPU_INDEX:
        fields["gpu"] = gpu.index
    found = (gpu.uuid if gpu is not None else None) or uuid
    if found:
        fields["gpu_uuid"] = found
    return fields


def xid_signal(
    node: str,
    xid: KernelXid,
    gpu: GpuInfo | None,
    uuid: str | None,
    observed_at: datetime,
    hardware: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`hardware`: the machine's and GPU's serials and VBIOS (agent/identity.py), as labels."""
    labels = {"pci": xid.pci, "message": xid.message[:MAX_LABEL]}
    labels.update({k: v[:MAX_LABEL] for k, v in (hardware or {}).items()})
    if xid.pid is not None:
        labels["pid"] = str(xid.pid)
    if xid.process:
        labels["process"] = xid.process[:MAX_LABEL]
    if xid.gpu_instance is not None:
        labels["gpu_instance"] = str(xid.gpu_instance)
    if xid.compute_instance is not None:
        labels["compute_instance"] = str(xid.compute_instance)
    return {
        "node": node,
        "kind": "xid",
        "source": SOURCE,
        "observed_at": observed_at.isoformat(),
        "code": xid.code,
        "labels": labels,
        **_gpu_fields(gpu, uuid),
    }


def missing_signal(
    node: str, index: int | None, expected: int, present: int, observed_at: datetime
) -> dict[str, Any]:
    signal: dict[str, Any] = {
        "node": node,
        "kind": "gpu_missing",
        "source": SOURCE,
        "observed_at": observed_at.isoformat(),
        "value": float(expected - present),
        "labels": {"expected": str(expected), "present": str(present)},
    }
    if index is not None and index <= MAX_GPU_INDEX:
        signal["gpu"] = index
    return signal


def heartbeat(
    node: str, agent: str, version: str, started_at: datetime, stats: dict[str, int]
) -> dict[str, Any]:
    return {
        "node": node,
        "agent": agent,
        "version": version,
        "started_at": started_at.isoformat(),
        "stats": stats,
    }
