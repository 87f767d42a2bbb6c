"""Object shapes the simulated kubelet and controllers write: nodes as a kubelet registers them,
pod status at each step of a container's life, core/v1 Events. Callers pass `now`; the pod
status steps edit the pod they are given (a draft from `ObjectStore.mutate`, or a new pod)."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from remediator.sim.kube.api.admission import admit_pod
from remediator.sim.kube.api.kobj import (
    GPU_RESOURCE,
    NOT_READY_TAINT,
    POOL_LABEL,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    condition,
    rfc3339,
)
from remediator.sim.kube.api.store import Obj

KUBELET_VERSION = "v1.32.2"
GPU_PRODUCTS = {
    "h100": ("NVIDIA-H100-80GB-HBM3", "gpu-8x-h100-80gb"),
    "a100": ("NVIDIA-A100-SXM4-80GB", "gpu-8x-a100-80gb"),
    "l40s": ("NVIDIA-L40S", "gpu-8x-l40s-48gb"),
    "gb200": ("NVIDIA-GB200", "gb200-nvl72-compute-tray"),
}

# (type, status when healthy, reason, message): the kubelet's own conditions, then the
# node-problem-detector style ones a GPU fleet runs.
HEALTHY_CONDITIONS = (
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock"),
    ("ReadonlyFilesystem", "False", "FilesystemIsNotReadOnly", "Filesystem is not read-only"),
    ("GpuXidError", "False", "NoXidError", "no critical XID reported by the GPU driver"),
)
READY_MESSAGE = "kubelet is posting ready status"
NOT_READY_MESSAGE = "container runtime status check may not have completed yet"


def _digest(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


def node_index(name: str) -> int:
    """A stable small number per node name, for addresses and CIDRs."""
    return zlib.crc32(name.encode()) % 60_000


def gpu_product(pool: str) -> tuple[str, str]:
    for family, product in GPU_PRODUCTS.items():
        if family in pool:
            return product
    return GPU_PRODUCTS["h100"]


def node(
    name: str, pool: str, gpus: int, labels: dict[str, str] | None, ready: bool, now: datetime
) -> Obj:
    product, instance_type = gpu_product(pool)
    index = node_index(name)
    ts = rfc3339(now)
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": "sim-central1",
        "topology.kubernetes.io/zone": f"sim-central1-{'abc'[index % 3]}",
        POOL_LABEL: pool,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
        **(labels or {}),
    }
    conditions = [
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
        }
        for type_, status, reason, message in HEALTHY_CONDITIONS
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": READY_MESSAGE if ready else NOT_READY_MESSAGE,
            "lastHeartbeatTime": ts,
            "lastTransitionTime": ts,
        }
    )
    capacity = {
        "cpu": "192",
        "memory": "2113363016Ki",
        "ephemeral-storage": "7500000000Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "pods": "110",
        GPU_RESOURCE: str(gpus),
    }
    allocatable = {**capacity, "cpu": "190", "memory": "2102877256Ki"}
    digest = _digest(name)
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "creationTimestamp": ts,
        },
        "spec": {
            "podCIDR": f"10.{64 + index // 256 % 64}.{index % 256}.0/24",
            "podCIDRs": [f"10.{64 + index // 256 % 64}.{index % 256}.0/24"],
            "providerID": f"simcloud://{pool}/{name}",
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conditions,
            "addresses": [
                {
                    "type": "InternalIP",
                    "address": f"172.{16 + index // 65536}.{index // 256 % 256}.{index % 256}",
                },
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": digest[:32],
                "systemUUID": "-".join(
                    (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])
                ),
                "bootID": _digest(name + ts)[:32],
                "kernelVersion": "5.15.0-1063-nvidia",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    obj["spec"]["taints"] = managed_taints(obj, [], now)
    if not obj["spec"]["taints"]:
        del obj["spec"]["taints"]
    return obj


def node_ip(node_obj: Obj) -> str:
    for address in node_obj.get("status", {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address["address"])
    return ""


def managed_taints(node_obj: Obj, current: list[Obj], now: datetime) -> list[Obj]:
    """The taints the node lifecycle controller keeps in line with the node's state (cordon,
    Ready False/Unknown), merged with the others the node carries; existing ones keep their
    timeAdded so that tolerationSeconds count from when the problem began."""
    ready = condition(node_obj, "Ready")
    status = ready.get("status") if ready else "Unknown"
    wanted: list[tuple[str, str]] = []
    if node_obj.get("spec", {}).get("unschedulable"):
        wanted.append((UNSCHEDULABLE_TAINT, "NoSchedule"))
    if status == "False":
        wanted += [(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")]
    elif status != "True":
        wanted += [(UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")]
    managed = {UNSCHEDULABLE_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT}
    existing = {(t.get("key"), t.get("effect")): t for t in current}
    out = [t for t in current if t.get("key") not in managed]
    for key, effect in wanted:
        taint = existing.get((key, effect))
        if taint is None:
            taint = {"key": key, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = rfc3339(now)
        out.append(taint)
    return out


# -- pods ------------------------------------------------------------------------------------


def _set_conditions(status: Obj, now: datetime, **wanted: tuple[str, str]) -> None:
    """Set pod conditions (type -> (status, reason)), keeping lastTransitionTime when unchanged."""
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    for type_, (value, reason) in wanted.items():
        cond = conditions.get(type_)
        if cond is None or cond.get("status") != value:
            cond = {
                "type": type_,
                "status": value,
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(now),
            }
        if reason:
            cond["reason"] = reason
        else:
            cond.pop("reason", None)
        conditions[type_] = cond
    order = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
        "DisruptionTarget",
    ]
    status["conditions"] = sorted(
        conditions.values(), key=lambda c: order.index(c["type"]) if c["type"] in order else 99
    )


def scheduled(pod: Obj, node_name: str, now: datetime) -> None:
    """What a binding writes: the node name and PodScheduled=True."""
    pod["spec"]["nodeName"] = node_name
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    _set_conditions(status, now, PodScheduled=("True", ""))


def unschedulable(pod: Obj, message: str, now: datetime) -> None:
    status = pod.setdefault("status", {})
    status["phase"] = "Pending"
    _set_conditions(status, now, PodScheduled=("False", "Unschedulable"))
    for cond in status["conditions"]:
        if cond["type"] == "PodScheduled":
            cond["message"] = message


def _identity(pod: Obj) -> str:
    meta = pod["metadata"]
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta['name']}")


def _container_id(pod: Obj, name: str) -> str:
    return "containerd://" + _digest(f"{_identity(pod)}/{name}")


def creating(pod: Obj, host_ip: str, now: datetime) -> None:
    """The kubelet has admitted the pod and is pulling images / creating containers."""
    status = pod.setdefault("status", {})
    status.update(
        phase="Pending",
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        startTime=rfc3339(now),
        qosClass=status.get("qosClass", "Burstable"),
    )
    _set_conditions(
        status,
        now,
        PodReadyToStartContainers=("False", ""),
        Initialized=("True", ""),
        Ready=("False", "ContainersNotReady"),
        ContainersReady=("False", "ContainersNotReady"),
        PodScheduled=("True", ""),
    )
    status["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "lastState": {},
        }
        for c in pod["spec"].get("containers") or []
    ]


class PodCIDRExhausted(Exception):
    """Every address of a node's pod CIDR is held by a live pod."""


POD_HOSTS = range(2, 252)  # the addresses of a node's /24 pod CIDR handed to pods


def pod_ip(pod: Obj, node_obj: Obj | None, in_use: Callable[[str], bool]) -> str:
    """A free address inside the node's pod CIDR: the one the pod's UID hashes to, else the next
    free one after it, as a node's IPAM never hands out an address a live pod holds."""
    cidr = (node_obj or {}).get("spec", {}).get("podCIDR", "10.64.0.0/24")
    base = cidr.split("/")[0].rsplit(".", 1)[0]
    first = zlib.crc32(_identity(pod).encode()) % len(POD_HOSTS)
    for step in range(len(POD_HOSTS)):
        ip = f"{base}.{POD_HOSTS[(first + step) % len(POD_HOSTS)]}"
        if not in_use(ip):
            return ip
    raise PodCIDRExhausted(f"no free address in {cidr} for pod {_identity(pod)}")


def running(pod: Obj, ip: str, now: datetime) -> None:
    """Containers started and passing readiness: phase Running, Ready=True."""
    status = pod.setdefault("status", {})
    status.update(phase="Running", podIP=ip, podIPs=[{"ip": ip}])
    status.setdefault("startTime", rfc3339(now))
    _set_conditions(
        status,
        now,
        PodReadyToStartContainers=("True", ""),
        Initialized=("True", ""),
        Ready=("True", ""),
        ContainersReady=("True", ""),
        PodScheduled=("True", ""),
    )
    status["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": c.get("image", "").split(":")[0]
            + "@sha256:"
            + _digest(c.get("image", ""))[:64],
            "containerID": _container_id(pod, c["name"]),
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": rfc3339(now)}},
            "lastState": {},
        }
        for c in pod["spec"].get("containers") or []
    ]


def ready_again(pod: Obj, now: datetime) -> None:
    """The kubelet reports its running containers ready again (after its node came back, or a
    readiness probe passing again)."""
    status = pod.setdefault("status", {})
    _set_conditions(status, now, Ready=("True", ""), ContainersReady=("True", ""))
    for container in status.get("containerStatuses") or []:
        if "running" in container.get("state", {}):
            container["ready"] = True


def unready(pod: Obj, now: datetime) -> None:
    """Its containers run but fail their readiness probe."""
    status = pod.setdefault("status", {})
    _set_conditions(
        status,
        now,
        Ready=("False", "ContainersNotReady"),
        ContainersReady=("False", "ContainersNotReady"),
    )
    for container in status.get("containerStatuses") or []:
        container["ready"] = False


def crashed(pod: Obj, now: datetime, backoff: float) -> None:
    """Its containers exited with an error (restartPolicy Always): shown terminated until the
    kubelet restarts them, or waiting in CrashLoopBackOff while it backs off, the exit kept as
    `lastState`, as the kubelet reports both."""
    status = pod.setdefault("status", {})
    unready(pod, now)
    for container in status.get("containerStatuses") or []:
        started = container.get("state", {}).get("running", {}).get("startedAt", rfc3339(now))
        exit_ = {
            "exitCode": 1,
            "reason": "Error",
            "startedAt": started,
            "finishedAt": rfc3339(now),
            "containerID": container.get("containerID", ""),
        }
        container["lastState"] = {"terminated": exit_}
        container["started"] = False
        if backoff > 0:
            container["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {backoff:g}s restarting failed container="
                    f"{container['name']} pod={pod['metadata']['name']}_"
                    f"{pod['metadata'].get('namespace', '')}({pod['metadata'].get('uid', '')})",
                }
            }
        else:
            container["state"] = {"terminated": dict(exit_)}


def restarted(pod: Obj, now: datetime) -> None:
    """The kubelet started the crashed containers again: one more restart each."""
    status = pod.setdefault("status", {})
    for container in status.get("containerStatuses") or []:
        container["restartCount"] = int(container.get("restartCount", 0)) + 1
        container["state"] = {"running": {"startedAt": rfc3339(now)}}
        container["started"] = True
    ready_again(pod, now)


def node_lost(pod: Obj, now: datetime) -> None:
    """MarkPodsNotReady: nobody vouches for the pods of an unreachable node any more."""
    _set_conditions(pod.setdefault("status", {}), now, Ready=("False", ""))


def exited(pod: Obj, exit_code: int, now: datetime) -> None:
    """A run-to-completion container returned on its own with `exit_code`."""
    terminated(pod, killed=exit_code != 0, now=now)
    for status in pod["status"].get("containerStatuses") or []:
        status["state"]["terminated"].update(
            exitCode=exit_code, reason="Completed" if exit_code == 0 else "Error"
        )


def terminated(pod: Obj, killed: bool, now: datetime) -> None:
    """Every container has exited: on its own after SIGTERM (0), or by SIGKILL (137)."""
    status = pod.setdefault("status", {})
    status["phase"] = "Failed" if killed else "Succeeded"
    _set_conditions(
        status,
        now,
        PodReadyToStartContainers=("False", ""),
        Ready=("False", "PodCompleted" if not killed else "PodFailed"),
        ContainersReady=("False", "PodCompleted" if not killed else "PodFailed"),
    )
    statuses = []
    for c in pod["spec"].get("containers") or []:
        previous: Obj = next(
            (s for s in status.get("containerStatuses") or [] if s["name"] == c["name"]), {}
        )
        started_at = previous.get("state", {}).get("running", {}).get("startedAt", rfc3339(now))
        statuses.append(
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": previous.get("imageID", ""),
                "containerID": _container_id(pod, c["name"]),
                "ready": False,
                "started": False,
                "restartCount": previous.get("restartCount", 0),
                "state": {
                    "terminated": {
                        "exitCode": 137 if killed else 0,
                        "reason": "Error" if killed else "Completed",
                        "startedAt": started_at,
                        "finishedAt": rfc3339(now),
                        "containerID": _container_id(pod, c["name"]),
                    }
                },
                "lastState": {},
            }
        )
    status["containerStatuses"] = statuses


def disruption_target(pod: Obj, now: datetime) -> None:
    """The condition the eviction subresource sets before deleting (PodDisruptionConditions)."""
    status = pod.setdefault("status", {})
    _set_conditions(status, now, DisruptionTarget=("True", "EvictionByEvictionAPI"))
    for cond in status["conditions"]:
        if cond["type"] == "DisruptionTarget":
            cond["message"] = "Eviction API: evicting"


def container_names(pod: Obj) -> str:
    return ", ".join(c["name"] for c in pod.get("spec", {}).get("containers") or [])


def pod_from_template(
    template: Obj,
    name: str,
    namespace: str,
    owner: Obj | None,
    now: datetime,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A new pod as a controller creates it from its template, through the same defaulting and
    admission as a pod POSTed to the API server (remediator/sim/kube/api/admission.py)."""
    tmeta = template.get("metadata") or {}
    spec = json.loads(json.dumps(template.get("spec") or {}))  # a deep copy, several times faster
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "labels": {**(tmeta.get("labels") or {}), **(labels or {})},
        "creationTimestamp": rfc3339(now),
    }
    merged_annotations = {**(tmeta.get("annotations") or {}), **(annotations or {})}
    if merged_annotations:
        meta["annotations"] = merged_annotations
    if owner is not None:
        meta["ownerReferences"] = [owner]
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    admit_pod(pod)
    return pod


# -- events ----------------------------------------------------------------------------------


def event(
    involved: Obj,
    reason: str,
    message: str,
    now: datetime,
    seq: int,
    *,
    type_: str = "Normal",
    component: str = "kubelet",
    host: str = "",
    field_path: str = "",
) -> Obj:
    """A core/v1 Event about `involved`; named `<name>.<hex nanos>` as client-go names them."""
    meta = involved["metadata"]
    nanos = int(now.timestamp() * 1_000_000_000) + seq
    ts = rfc3339(now)
    ref: dict[str, Any] = {
        "apiVersion": involved.get("apiVersion", "v1"),
        "kind": involved.get("kind", "Pod"),
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if field_path:
        ref["fieldPath"] = field_path
    source: dict[str, str] = {"component": component}
    if host:
        source["host"] = host
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{nanos:x}",
            "namespace": meta.get("namespace") or "default",
            "creationTimestamp": ts,
        },
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": type_,
        "source": source,
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host,
    }
