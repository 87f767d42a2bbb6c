"""Small constructors for the frozen Kubernetes views, so tests state only what matters."""

from __future__ import annotations

from datetime import datetime

from remediator.kube.objects import MIRROR_ANNOTATION, Node, NodeCondition, OwnerRef, Pod, Taint


def node(
    name: str = "gpu-1",
    *,
    unschedulable: bool = False,
    taints: tuple[Taint, ...] = (),
    annotations: dict[str, str] | None = None,
    ready: bool = True,
) -> Node:
    return Node(
        name=name,
        uid=f"uid-{name}",
        resource_version="1",
        annotations=annotations or {},
        unschedulable=unschedulable,
        taints=taints,
        conditions=(NodeCondition("Ready", "True" if ready else "False", "KubeletReady"),),
    )


def pod(
    name: str,
    *,
    owner: str | None = "ReplicaSet",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    deleting_at: datetime | None = None,
    grace: int | None = None,
    phase: str = "Running",
    mirror: bool = False,
) -> Pod:
    ann = dict(annotations or {})
    if mirror:
        ann[MIRROR_ANNOTATION] = "abc"
    owners = (OwnerRef(owner, f"{name}-owner", f"uid-{name}-owner", True),) if owner else ()
    return Pod(
        namespace="ml",
        name=name,
        uid=f"uid-{name}",
        node_name="gpu-1",
        labels=labels or {},
        annotations=ann,
        owners=owners,
        phase=phase,
        deletion_timestamp=deleting_at,
        deletion_grace_seconds=grace,
    )
