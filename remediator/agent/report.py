"""What the agent reports, as the push API's JSON: pure, so the tests pin the shapes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from remediator.agent.fabric import FabricManagerLine, FabricManagerState, GpuFabric
from remediator.agent.gpus import GpuInfo
from remediator.ledger.identity import HostHardware
from remediator.signals.sxid import KernelSxid, lookup
from remediator.signals.xid import KernelXid

SOURCE = "agent"
MAX_GPU_INDEX = 1023
MAX_LABEL = 200
# The kernel's line as read: a printk record holds at most 1,024 bytes (LOG_LINE_MAX).
MAX_LINE = 1024


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
    """`hardware`: the machine's and GPU's serials, VBIOS and driver (agent/identity.py), as
    labels; `line`: the kernel's line whole, for the RMA evidence (rma/bundle.py)."""
    labels = {"pci": xid.pci, "message": xid.message[:MAX_LABEL]}
    if xid.line:
        labels["line"] = xid.line[:MAX_LINE]
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


def _fabric_labels(fabric: GpuFabric | None) -> dict[str, str]:
    """The NVLink domain (clusterUUID) and clique of the tray, when `nvidia-smi -q` told them."""
    if fabric is None or fabric.cluster_uuid is None:
        return {}
    labels = {"domain": fabric.cluster_uuid[:MAX_LABEL]}
    if fabric.clique_id is not None:
        labels["clique"] = str(fabric.clique_id)
    return labels


def sxid_signal(
    node: str, sxid: KernelSxid, fabric: GpuFabric | None, observed_at: datetime
) -> dict[str, Any]:
    """An NVSwitch error. `fatal` is the driver's own verdict on the line; the catalog's name and
    reach are added when the code is known (`impact` "unknown" when not). A line that could not
    be read goes out with its raw text and no code, so it is recorded and shown, not lost."""
    labels: dict[str, str] = {"message": sxid.message[:MAX_LABEL], **_fabric_labels(fabric)}
    if sxid.switch is not None:
        labels["switch"] = str(sxid.switch)
    if sxid.pci is not None:
        labels["pci"] = sxid.pci
    if sxid.link is not None:
        labels["link"] = str(sxid.link)
    labels["fatal"] = "unknown" if sxid.fatal is None else str(sxid.fatal).lower()
    info = lookup(sxid.code) if sxid.code is not None else None
    labels["impact"] = info.impact.value if info is not None else "unknown"
    if info is not None:
        labels["name"] = info.name
    if sxid.raw is not None:
        labels["raw"] = sxid.raw[:MAX_LABEL]
    signal: dict[str, Any] = {
        "node": node,
        "kind": "sxid",
        "source": SOURCE,
        "observed_at": observed_at.isoformat(),
        "labels": labels,
    }
    if sxid.code is not None:
        signal["code"] = sxid.code
    return signal


def fabric_manager_signal(
    node: str,
    observed_at: datetime,
    *,
    state: FabricManagerState | None = None,
    line: FabricManagerLine | None = None,
) -> dict[str, Any]:
    """Fabric Manager not active (`state`), or an error line from its log (`line`); code 1 for
    trouble, 0 when the service is active again."""
    labels: dict[str, str] = {}
    healthy = True
    if state is not None:
        labels["state"] = state.state[:MAX_LABEL]
        healthy = state.healthy
    if line is not None:
        labels["level"] = line.level
        labels["message"] = line.message[:MAX_LABEL]
        healthy = False
    return {
        "node": node,
        "kind": "fabric_manager",
        "source": SOURCE,
        "observed_at": observed_at.isoformat(),
        "code": 0 if healthy else 1,
        "labels": labels,
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
    node: str,
    agent: str,
    version: str,
    started_at: datetime,
    stats: dict[str, int],
    hardware: HostHardware | None = None,
    *,
    whole: bool = False,
) -> dict[str, Any]:
    """`hardware`: the host's identity, named by its digest, and sent `whole` on the first
    heartbeat and when the controller asked (docs/agent.md)."""
    body: dict[str, Any] = {
        "node": node,
        "agent": agent,
        "version": version,
        "started_at": started_at.isoformat(),
        "stats": stats,
    }
    if hardware is not None:
        body["hardware_digest"] = hardware.digest
        if whole:
            body["hardware"] = hardware.wire()
    return body
