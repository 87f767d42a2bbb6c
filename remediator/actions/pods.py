"""Which pods on a node a remediation must deal with, as `kubectl drain` decides it.

DaemonSet pods would be recreated on the same node at once (and tolerate the cordon), and mirror
pods are only the API's reflection of the kubelet's static pods: neither can be moved away.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from remediator.kube.objects import Pod

OPT_OUT_LABEL = "remediator.io/disable-auto-replace"


def skip_reason(pod: Pod) -> str | None:
    """Why a drain leaves this pod alone, or None when it must go."""
    if pod.mirror:
        return "mirror pod"
    if pod.daemonset_owned:
        return "DaemonSet-managed"
    return None


def movable(pods: Iterable[Pod]) -> list[Pod]:
    """Pods a drain evicts (including ones already terminating)."""
    return [p for p in pods if skip_reason(p) is None]


def workloads(pods: Iterable[Pod]) -> list[Pod]:
    """Running work that could still save state: movable, not terminating, not finished."""
    return [p for p in movable(pods) if not p.terminating and not p.finished]


def opted_out(pods: Iterable[Pod], label: str = OPT_OUT_LABEL, value: str = "true") -> list[Pod]:
    """Pods whose owners asked that their node not be replaced automatically."""
    return [
        p
        for p in pods
        if not p.terminating and not p.finished and p.labels.get(label, "").lower() == value
    ]


def eviction_facts(pod: Pod) -> dict[str, Any]:
    """What the timeline keeps of an evicted pod for the GPU-hours of workload disrupted: its
    UID, GPUs and controlling owner (or that it has none: nothing will recreate it)."""
    facts: dict[str, Any] = {"uid": pod.uid, "gpus": pod.gpus}
    owner = pod.controller
    if owner is None:
        facts["unmanaged"] = True
    else:
        facts["owner"] = {"kind": owner.kind, "name": owner.name, "uid": owner.uid}
    return facts
