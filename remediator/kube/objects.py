"""Our own frozen views of the Kubernetes objects remediator reads, built from raw API JSON.

Actions and planners work on these instead of the client's models, so that the decision code is
pure, cheap to build in tests, and never sees a `kubernetes` type.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
GPU_RESOURCE = "nvidia.com/gpu"


def _shared(value: Any) -> str:
    """One copy of a string every node repeats (label keys and values, condition reasons and
    messages): the node cache then grows by what differs per node, not by every node's text."""
    return sys.intern(str(value))


def _shared_map(raw: Any) -> dict[str, str]:
    return {_shared(k): _shared(v) for k, v in (raw or {}).items()}


def parse_time(value: object) -> datetime | None:
    """RFC3339 (with or without fractional seconds) → aware UTC datetime; junk → None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


_TIMES: dict[str, datetime | None] = {}


def _shared_time(value: object) -> datetime | None:
    """parse_time, one object per distinct timestamp: a fleet's conditions mostly carry the
    same few transition times (nodes booted together), so 10,000 nodes x 5 conditions need not
    hold 50,000 datetimes. Bounded: past 4,096 distinct strings the table starts over."""
    if not isinstance(value, str):
        return parse_time(value)
    shared = _TIMES.get(value)
    if shared is None:
        if len(_TIMES) >= 4096:
            _TIMES.clear()
        shared = _TIMES[value] = parse_time(value)
    return shared


def format_time(when: datetime) -> str:
    """The API's `Time` format (seconds precision, Z)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(when: datetime) -> str:
    """The API's `MicroTime` format, used by Leases and events.k8s.io."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Taint:
    """`time_added` is kept verbatim: taints are written back whole, and the node lifecycle
    controller's timestamps on its own taints must survive our read-modify-write."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"
    time_added: str | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Taint:
        added = raw.get("timeAdded")
        return cls(
            str(raw.get("key", "")),
            str(raw.get("value") or ""),
            str(raw.get("effect", "")),
            str(added) if added else None,
        )

    @classmethod
    def parse(cls, spec: str) -> Taint:
        """`key[=value]:effect`, as kubectl taint and the kubelet's --register-with-taints take
        it (checked where it is configured: the policy settings' `startup_taint`)."""
        head, _, effect = spec.rpartition(":")
        key, _, value = head.partition("=")
        return cls(key, value, effect)

    def to_json(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        if self.time_added:
            out["timeAdded"] = self.time_added
        return out

    def same_slot(self, other: Taint) -> bool:
        """The API server keeps at most one taint per (key, effect)."""
        return self.key == other.key and self.effect == other.effect


@dataclass(frozen=True, slots=True)
class NodeCondition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition: datetime | None = None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    uid: str
    resource_version: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    conditions: tuple[NodeCondition, ...] = ()
    created_at: datetime | None = None
    gpus: int | None = None  # capacity `nvidia.com/gpu`; None when the node does not say
    provider_id: str = ""  # spec.providerID: how a cloud provider names this machine
    boot_id: str = ""  # status.nodeInfo.bootID: changes with every boot

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Node:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        return cls(
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            labels=_shared_map(meta.get("labels")),
            annotations=_shared_map(meta.get("annotations")),
            unschedulable=bool(spec.get("unschedulable", False)),
            taints=tuple(Taint.from_json(t) for t in spec.get("taints") or ()),
            conditions=tuple(
                NodeCondition(
                    _shared(c.get("type", "")),
                    _shared(c.get("status", "")),
                    _shared(c.get("reason") or ""),
                    _shared(c.get("message") or ""),
                    _shared_time(c.get("lastTransitionTime")),
                )
                for c in status.get("conditions") or ()
            ),
            created_at=parse_time(meta.get("creationTimestamp")),
            gpus=_quantity((status.get("capacity") or {}).get(GPU_RESOURCE)),
            provider_id=str(spec.get("providerID") or ""),
            boot_id=str((status.get("nodeInfo") or {}).get("bootID") or ""),
        )

    def condition(self, type_: str) -> NodeCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)

    @property
    def ready(self) -> bool:
        cond = self.condition("Ready")
        return cond is not None and cond.status == "True"

    def has_taint(self, taint: Taint) -> bool:
        return any(t.same_slot(taint) for t in self.taints)


def _exit_code(status: Mapping[str, Any]) -> int | None:
    for container in (status.get("containerStatuses") or [])[:1]:
        terminated = (container.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode") is not None:
            return int(terminated["exitCode"])
    return None


def _quantity(raw: Any) -> int | None:
    """A whole-number resource quantity ("8"); None when absent or not a plain count."""
    try:
        return int(str(raw)) if raw is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class OwnerRef:
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[OwnerRef, ...] = ()
    phase: str = "Pending"
    deletion_timestamp: datetime | None = None
    deletion_grace_seconds: int | None = None
    termination_grace_seconds: int | None = None
    uses_empty_dir: bool = False
    gpus: int = 0  # `nvidia.com/gpu` the pod holds (see pod_gpus)
    created_at: datetime | None = None
    running_since: datetime | None = None  # when it last became Ready while Running
    exit_code: int | None = None  # the first container's, once it terminated
    # Label key → when the newest managedFields entry owning it was written (absent: unknown).
    label_set_at: Mapping[str, datetime] = field(default_factory=dict)
    # Why the pod cannot run where it is: the scheduler's Unschedulable message, or the kubelet's
    # admission refusal (a Failed pod's reason, e.g. OutOfnvidia.com/gpu); "" when neither.
    unschedulable: str = ""

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Pod:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        grace = meta.get("deletionGracePeriodSeconds")
        term = spec.get("terminationGracePeriodSeconds")
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            node_name=str(spec.get("nodeName") or ""),
            labels=_shared_map(meta.get("labels")),
            annotations=_shared_map(meta.get("annotations")),
            owners=tuple(
                OwnerRef(
                    str(o.get("kind", "")),
                    str(o.get("name", "")),
                    str(o.get("uid", "")),
                    bool(o.get("controller", False)),
                )
                for o in meta.get("ownerReferences") or ()
            ),
            phase=str(status.get("phase") or "Pending"),
            deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
            deletion_grace_seconds=int(grace) if grace is not None else None,
            termination_grace_seconds=int(term) if term is not None else None,
            uses_empty_dir=any("emptyDir" in v for v in spec.get("volumes") or ()),
            gpus=pod_gpus(spec),
            created_at=parse_time(meta.get("creationTimestamp")),
            running_since=_running_since(status),
            exit_code=_exit_code(status),
            label_set_at=label_times(meta.get("managedFields")),
            unschedulable=_unschedulable(status),
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def controller(self) -> OwnerRef | None:
        return next((o for o in self.owners if o.controller), None)

    @property
    def daemonset_owned(self) -> bool:
        ctrl = self.controller
        return ctrl is not None and ctrl.kind == "DaemonSet"

    @property
    def mirror(self) -> bool:
        """A static pod's API-side reflection: deleting it does nothing to the kubelet's pod."""
        return MIRROR_ANNOTATION in self.annotations

    @property
    def terminating(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def sigterm_at(self) -> datetime | None:
        """When the kubelet was told to stop it: deletionTimestamp is set to that moment + grace."""
        if self.deletion_timestamp is None:
            return None
        return self.deletion_timestamp - timedelta(seconds=self.deletion_grace_seconds or 0)


def _gpu_count(container: Mapping[str, Any]) -> int:
    """A container's GPUs: its request, else its limit (an extended resource's request defaults
    to its limit and may not differ from it)."""
    resources = container.get("resources") or {}
    for key in ("requests", "limits"):
        value = (resources.get(key) or {}).get(GPU_RESOURCE)
        if value is not None:
            try:
                return max(0, int(str(value)))
            except ValueError:
                return 0
    return 0


def pod_gpus(spec: Mapping[str, Any]) -> int:
    """The GPUs the scheduler sets aside for a pod: the sum over its containers, or its largest
    init container when that is more (init containers run one at a time, before the rest)."""
    running = sum(_gpu_count(c) for c in spec.get("containers") or ())
    init = max((_gpu_count(c) for c in spec.get("initContainers") or ()), default=0)
    return max(running, init)


def label_times(entries: Any) -> dict[str, datetime]:
    """When each label was last written, as far as the API server's field ownership says: an
    entry's `time` is when that manager last changed its fields, so the newest owner wins."""
    found: dict[str, datetime] = {}
    for entry in entries or ():
        if not isinstance(entry, Mapping):
            continue
        at = parse_time(entry.get("time"))
        fields = entry.get("fieldsV1") or {}
        labels = (fields.get("f:metadata") or {}).get("f:labels") if at else None
        if not isinstance(labels, Mapping) or at is None:
            continue
        for key in labels:
            if key.startswith("f:"):
                name = key[2:]
                found[name] = max(at, found.get(name, at))
    return found


def _running_since(status: Mapping[str, Any]) -> datetime | None:
    """When a Running pod became Ready (its Ready condition's transition), else when the kubelet
    started it; None while it is not Running."""
    if status.get("phase") != "Running":
        return None
    for cond in status.get("conditions") or ():
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime")) or parse_time(status.get("startTime"))
    return parse_time(status.get("startTime"))


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        return False  # an operator the API server would have refused: select nothing


@dataclass(frozen=True)
class LabelSelector:
    """metav1.LabelSelector: every matchLabels pair and every matchExpressions requirement must
    hold, so an empty selector selects everything."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LabelSelector:
        return cls(
            {str(k): str(v) for k, v in (raw.get("matchLabels") or {}).items()},
            tuple(
                LabelRequirement(
                    str(e.get("key", "")),
                    str(e.get("operator", "")),
                    tuple(str(v) for v in e.get("values") or ()),
                )
                for e in raw.get("matchExpressions") or ()
            ),
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True)
class PodDisruptionBudget:
    """A policy/v1 PDB with the disruption controller's view of it: what a blocked drain tells
    on-call. `min_available`/`max_unavailable` keep the int-or-percent the owner wrote."""

    namespace: str
    name: str
    selector: LabelSelector | None
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0
    disruptions_allowed: int = 0

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> PodDisruptionBudget:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        selector = spec.get("selector")
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            selector=LabelSelector.from_json(selector) if isinstance(selector, Mapping) else None,
            min_available=_int_or_string(spec.get("minAvailable")),
            max_unavailable=_int_or_string(spec.get("maxUnavailable")),
            current_healthy=int(status.get("currentHealthy") or 0),
            desired_healthy=int(status.get("desiredHealthy") or 0),
            expected_pods=int(status.get("expectedPods") or 0),
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: Pod) -> bool:
        """A null selector selects no pod; policy/v1's empty one selects all in its namespace."""
        return (
            self.selector is not None
            and pod.namespace == self.namespace
            and self.selector.matches(pod.labels)
        )


def _int_or_string(value: object) -> int | str | None:
    if value is None or isinstance(value, bool):
        return None
    return value if isinstance(value, int) else str(value)


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def of_node(cls, node: Node) -> ObjectRef:
        return cls("Node", node.name, "", node.uid)

    @classmethod
    def of_pod(cls, pod: Pod) -> ObjectRef:
        return cls("Pod", pod.name, pod.namespace, pod.uid)


@dataclass(frozen=True)
class Lease:
    namespace: str
    name: str
    holder: str | None = None
    duration_seconds: int | None = None
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    resource_version: str = ""

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Lease:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            holder=spec.get("holderIdentity") or None,
            duration_seconds=int(duration) if duration is not None else None,
            acquire_time=parse_time(spec.get("acquireTime")),
            renew_time=parse_time(spec.get("renewTime")),
            transitions=int(spec.get("leaseTransitions") or 0),
            resource_version=str(meta.get("resourceVersion", "")),
        )

    def to_json(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"leaseTransitions": self.transitions}
        if self.holder:
            spec["holderIdentity"] = self.holder
        if self.duration_seconds is not None:
            spec["leaseDurationSeconds"] = self.duration_seconds
        if self.acquire_time is not None:
            spec["acquireTime"] = format_micro_time(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_micro_time(self.renew_time)
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self.resource_version:
            meta["resourceVersion"] = self.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def expired(self, unchanged_for: float) -> bool:
        """Free to take: nobody holds it, or this very version of it (no renewal since) has been
        seen for longer than its duration, timed by the observer's own monotonic clock. Reading
        renewTime against our wall clock instead would let a replica whose clock runs ahead take
        a lease its holder is still renewing (client-go times it the same way)."""
        if not self.holder or self.duration_seconds is None:
            return True
        return unchanged_for > self.duration_seconds


class EvictionResult(StrEnum):
    EVICTED = "evicted"
    BLOCKED_BY_PDB = "blocked_by_pdb"
    NOT_FOUND = "not_found"
    MULTIPLE_PDBS = "multiple_pdbs"
    # The API server did not take the request (429 from API Priority and Fairness, 5xx, a lost
    # connection): nothing happened to the pod; ask again after `retry_after`.
    API_UNAVAILABLE = "api_unavailable"
    ERROR = "error"


@dataclass(frozen=True)
class EvictionOutcome:
    result: EvictionResult
    message: str = ""
    retry_after: float | None = None


# A Failed pod's status.reason when the kubelet refused to admit it (not a program's failure).
_ADMISSION_REASONS = ("OutOf", "NodeAffinity", "NodeSelectorMismatching", "UnexpectedAdmission")


def _unschedulable(status: Mapping[str, Any]) -> str:
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "Unschedulable")
    reason = str(status.get("reason") or "")
    if status.get("phase") == "Failed" and reason.startswith(_ADMISSION_REASONS):
        return f"{reason}: {status.get('message') or 'refused by the kubelet'}"
    return ""
