"""Pure helpers over Kubernetes objects as JSON-shaped dicts, shared by the simulated kubelet,
scheduler and controllers: time stamps, label selectors, tolerations, pod state, owners."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from remediator.sim.kube.api.store import Obj

GPU_RESOURCE = "nvidia.com/gpu"
POOL_LABEL = "simcloud.io/nodepool"

# Annotations and labels the simulated workloads understand.
SHUTDOWN_SECONDS = "sim.remediator.io/shutdown-seconds"
STARTUP_SECONDS = "sim.remediator.io/startup-seconds"
CHECKPOINT_SECONDS = "sim.remediator.io/checkpoint-seconds"
GANG_LABEL = "sim.remediator.io/gang"
GANG_GENERATION = "sim.remediator.io/gang-generation"
CHECKPOINT_HANDSHAKE = "remediator.io/checkpoint-handshake"
CHECKPOINT_REQUESTED = "remediator.io/checkpoint-requested"
CHECKPOINT_DONE = "remediator.io/checkpoint-done"
OPT_OUT_LABEL = "remediator.io/disable-auto-replace"

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"

DEFAULT_GRACE_SECONDS = 30
# Names generated the way Kubernetes does: no vowels, no digits that read as letters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@functools.lru_cache(maxsize=256)
def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def name_suffix(seed: str, length: int = 5) -> str:
    """A deterministic stand-in for the random suffix of generated names."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:length])


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def labels_of(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def annotation(obj: Obj, name: str) -> str | None:
    value = (obj["metadata"].get("annotations") or {}).get(name)
    return None if value is None else str(value)


def float_annotation(obj: Obj, name: str, default: float | None) -> float | None:
    value = annotation(obj, name)
    if value is None:
        return default
    try:
        return max(0.0, float(value))
    except ValueError:
        return default


# -- label selectors (metav1.LabelSelector) -------------------------------------------------


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: a null selector matches nothing, an empty one everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def equality_anchor(selector: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """One label every matching object must carry, for indexing; None when there is none."""
    if not selector:
        return None
    match_labels = selector.get("matchLabels") or {}
    if match_labels:
        key = min(match_labels)
        return key, str(match_labels[key])
    for expr in selector.get("matchExpressions") or []:
        if expr["operator"] == "In" and len(expr.get("values") or []) == 1:
            return expr["key"], str(expr["values"][0])
    return None


# -- taints and tolerations ------------------------------------------------------------------


def tolerates(tolerations: list[Obj], taint: Mapping[str, Any]) -> Obj | None:
    """The toleration that matches a taint (core/v1 `Toleration.ToleratesTaint`), if any."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = tol.get("key") or ""
        if key and key != taint.get("key"):
            continue
        operator = tol.get("operator") or "Equal"
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return tol
    return None


# -- pods ------------------------------------------------------------------------------------


def gpu_request(pod: Obj) -> int:
    """GPUs the pod asks for; extended resources are set as limits (requests default to them)."""
    total = 0
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE)
        if value is None:
            value = (resources.get("requests") or {}).get(GPU_RESOURCE)
        if value is not None:
            total += int(value)
    return total


def is_terminating(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_active(pod: Obj) -> bool:
    """Counts toward a controller's replicas: neither terminating nor finished."""
    return not is_terminating(pod) and not is_terminal(pod)


def condition(obj: Obj, type_: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def is_ready(pod: Obj) -> bool:
    cond = condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def controller_ref(obj: Obj) -> Obj | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_reference(owner: Obj, kind: str, api_version: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def grace_seconds(pod: Obj) -> int:
    value = pod.get("spec", {}).get("terminationGracePeriodSeconds")
    return DEFAULT_GRACE_SECONDS if value is None else int(value)
