"""The kubelet's own admission, as its predicate admit handler does it: a pod the scheduler never
weighed (bound by `nodeName`) must still fit what the node has left, or the kubelet rejects it —
phase Failed, reason `OutOf<resource>`, "Pod was rejected: Node didn't have enough resource: …".
Only `nvidia.com/gpu` is held here: it is what a GPU fleet runs out of. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from remediator.sim.kube.api.kobj import GPU_RESOURCE, gpu_request, rfc3339
from remediator.sim.kube.api.store import Obj


def gpu_refusal(requested: int, used: int, capacity: int) -> tuple[str, str] | None:
    """(reason, message) when `requested` GPUs do not fit beside `used` of `capacity`."""
    if not requested or used + requested <= capacity:
        return None
    return (
        f"OutOf{GPU_RESOURCE}",
        f"Node didn't have enough resource: {GPU_RESOURCE}, requested: {requested}, "
        f"used: {used}, capacity: {capacity}",
    )


def gpus_used(admitted: Iterable[Obj]) -> int:
    return sum(gpu_request(pod) for pod in admitted)


def rejected(pod: Obj, reason: str, message: str, now: datetime) -> None:
    """The status the kubelet writes for a pod it will not run."""
    status = pod.setdefault("status", {})
    status.update(
        phase="Failed",
        reason=reason,
        message=f"Pod was rejected: {message}",
        startTime=status.get("startTime") or rfc3339(now),
    )
