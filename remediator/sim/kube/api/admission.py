"""What a real API server adds to a pod between the request and etcd: the core/v1 defaulting
(SetDefaults_PodSpec, SetDefaults_Container, requests from limits), the ServiceAccount, Priority
and DefaultTolerationSeconds admission plugins, and the QoS class the pod strategy computes.

One definition for every way a pod comes into being (kubectl or a client POSTing it, or a
simulated controller stamping it from a template), so that a pod created by hand survives a
NotReady node for 300 s exactly as one from a ReplicaSet does, and `kubectl get pod -o yaml`
shows what it shows on a real cluster. Pure functions editing the pod draft they are given.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from remediator.sim.kube.api.kobj import NOT_READY_TAINT, UNREACHABLE_TAINT
from remediator.sim.kube.api.store import ApiError, Obj

DEFAULT_TOLERATION_SECONDS = 300
DEFAULT_TOLERATIONS = tuple(
    {
        "key": key,
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
    }
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT)
)
POD_SPEC_DEFAULTS: dict[str, Any] = {
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
    "schedulerName": "default-scheduler",
    "enableServiceLinks": True,
}
# The classes every cluster has; the simulator serves no scheduling.k8s.io API, so no other
# PriorityClass can exist in it.
SYSTEM_PRIORITY_CLASSES = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}
# Only these count toward the QoS class (extended resources such as GPUs do not).
QOS_RESOURCES = ("cpu", "memory")
_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}

_SUFFIX_CHARS = "".join(sorted({c for suffix in _SUFFIXES for c in suffix}))


class Forbidden(ApiError):
    code, reason = 403, "Forbidden"


def quantity(value: object) -> Decimal:
    """A resource.Quantity as a number, so that "1" and "1000m" compare equal; junk is 0 (the
    real server would have refused it in validation)."""
    text = str(value).strip()
    digits = text.rstrip(_SUFFIX_CHARS)  # "1e3" keeps its exponent: it ends in a digit
    suffix = text[len(digits) :]
    if suffix not in _SUFFIXES:
        return Decimal(0)
    try:
        return Decimal(digits) * _SUFFIXES[suffix]
    except InvalidOperation:
        return Decimal(0)


def pull_policy(image: str) -> str:
    """`Always` for an untagged or `:latest` image, else `IfNotPresent` (a digest pins it)."""
    if "@" in image:
        return "IfNotPresent"
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_container(container: Obj) -> None:
    container.setdefault("imagePullPolicy", pull_policy(str(container.get("image", ""))))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")


def tolerates_by_default(tolerations: list[Obj], key: str) -> bool:
    """The plugin's own test: a NoExecute (or any-effect) toleration of `key` (or of any key)."""
    return any(
        (t.get("key") or "") in (key, "") and (t.get("effect") or "") in ("NoExecute", "")
        for t in tolerations
    )


def qos_class(spec: Obj) -> str:
    """GetPodQOS over cpu and memory: Guaranteed when every container limits both and requests
    what it limits, BestEffort when none asks for either, else Burstable."""
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in QOS_RESOURCES:
            request = quantity(requests[name]) if name in requests else None
            limit = quantity(limits[name]) if name in limits else None
            if (request or 0) > 0 or (limit or 0) > 0:
                any_set = True
            if not limit or request != limit:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def name_of(pod: Obj) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "")


def check_priority(pod: Obj) -> None:
    """The Priority plugin's refusals for a pod POSTed to the API: a class that does not exist,
    or a `priority` other than the one its class resolves to. Controllers' pods skip this: a
    real controller would only record FailedCreate, and the simulator's reconcile loop must
    not stop on one bad template."""
    spec = pod.get("spec") or {}
    class_name = spec.get("priorityClassName")
    if class_name and class_name not in SYSTEM_PRIORITY_CLASSES:
        raise Forbidden(
            f'pods "{name_of(pod)}" is forbidden: no PriorityClass with name {class_name} '
            "was found",
            details={"name": name_of(pod), "kind": "pods"},
        )
    priority = SYSTEM_PRIORITY_CLASSES.get(class_name or "", 0)
    if spec.get("priority") not in (None, priority):
        raise Forbidden(
            f'pods "{name_of(pod)}" is forbidden: the integer value of priority '
            f"({spec['priority']}) must not be provided in pod spec; priority admission "
            f"controller computed {priority} from the given PriorityClass name",
            details={"name": name_of(pod), "kind": "pods"},
        )


def admit_pod(pod: Obj) -> None:
    """Default the pod as the API server does on create; fields the client set are kept, except
    the priority, which its class decides (check_priority refuses a contradiction first)."""
    spec = pod.setdefault("spec", {})
    for field, value in POD_SPEC_DEFAULTS.items():
        spec.setdefault(field, value)
    spec.setdefault("securityContext", {})
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = spec["serviceAccount"] = account
    spec["priority"] = SYSTEM_PRIORITY_CLASSES.get(spec.get("priorityClassName") or "", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        _default_container(container)
    tolerations = spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        if not tolerates_by_default(tolerations, str(default["key"])):
            tolerations.append(dict(default))
    pod.setdefault("status", {})["qosClass"] = qos_class(spec)
