"""The seeded GPU fleet: what a large training-and-inference cluster looks like on an ordinary
day, derived from its size alone so that every run of the same size is the same cluster.

Two pools of 8-GPU nodes, about 75/25: `h100-train` runs multi-node training gangs (Indexed
Jobs whose pods take a whole node each), a long evaluation run that opts out of automatic
replacement, and a few idle spares; `a100-infer` is tainted for inference, whose Deployments
spread their replicas and each carry a budget that lets at most one replica go at a time.
DCGM exporter and node-problem-detector run on every GPU node. Pure: `SimCluster.seed` creates
it, so that the cluster below does not depend on this description of one fleet above it."""

from __future__ import annotations

from remediator.sim.kube.api.kobj import (
    CHECKPOINT_HANDSHAKE,
    CHECKPOINT_SECONDS,
    GANG_LABEL,
    GPU_RESOURCE,
    OPT_OUT_LABEL,
    POOL_LABEL,
    SHUTDOWN_SECONDS,
    name_suffix,
)
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import FleetPlan, Workload

TRAIN_POOL = "h100-train"
INFER_POOL = "a100-infer"
NAMESPACES = (
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "gpu-operator",
    "training",
    "inference",
    "eval",
    "remediator",
)
# The node agent's DaemonSet as deploy/ names and labels it: the controller watches its pods.
AGENT_LABELS = {
    "app.kubernetes.io/name": "remediator",
    "app.kubernetes.io/instance": "remediator",
    "app.kubernetes.io/component": "agent",
}
INFERENCE_TAINT = {"key": "simcloud.io/dedicated", "value": "inference", "effect": "NoSchedule"}
POOL_TAINTS: dict[str, list[Obj]] = {INFER_POOL: [INFERENCE_TAINT]}
GANG_SIZES = (16, 8, 32, 4, 8, 16, 2, 4)
TRAIN_MODELS = ("dit-xl", "llama-70b", "moe-8x22b", "vit-g", "video-dit")
INFER_MODELS = ("llama-8b-chat", "embed-large", "rerank-v2", "whisper-large", "sdxl-turbo")
INFERENCE_FILL = 0.7
EVAL_POD = "eval-longrun-0"


def pool_sizes(nodes: int) -> tuple[int, int]:
    """(training, inference) node counts: about 75/25, both pools present from two nodes up."""
    if nodes <= 1:
        return nodes, 0
    train = min(nodes - 1, max(1, round(nodes * 0.75)))
    return train, nodes - train


def _gangs(count: int) -> list[int]:
    """Gang sizes (powers of two, at least 2) that fill `count` nodes, in a fixed mix."""
    sizes: list[int] = []
    left = count
    i = 0
    while left >= 2:
        size = min(GANG_SIZES[i % len(GANG_SIZES)], left)
        size = 1 << (size.bit_length() - 1)
        sizes.append(size)
        left -= size
        i += 1
    return sizes


def daemonset(name: str, namespace: str, image: str, port: int | None) -> Obj:
    labels = {"app.kubernetes.io/name": name}
    container: Obj = {
        "name": name,
        "image": image,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    if port:
        container["ports"] = [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "generation": 1},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.present": "true"},
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    "containers": [container],
                },
            },
        },
    }


def agent_daemonset() -> Obj:
    """The node agent on every GPU node (deploy/base/agent-daemonset.yaml): its pods are what
    the controller judges an agent's liveness by (model/agent_liveness.py)."""
    ds = daemonset("remediator-agent", "remediator", "remediator:0.1.0", None)
    ds["metadata"]["labels"] = dict(AGENT_LABELS)
    ds["spec"]["selector"] = {"matchLabels": dict(AGENT_LABELS)}
    template = ds["spec"]["template"]
    template["metadata"]["labels"] = dict(AGENT_LABELS)
    template["spec"]["containers"][0]["name"] = "agent"
    return ds


def _training(index: int, size: int, nodes: list[str], gpus: int) -> Workload:
    model = TRAIN_MODELS[index % len(TRAIN_MODELS)]
    name = f"{model}-pretrain-{index:03d}"
    labels = {GANG_LABEL: name, "app.kubernetes.io/name": "trainer", "team": model.split("-")[0]}
    template: Obj = {
        "metadata": {
            "labels": labels,
            # The trainers speak the checkpoint handshake; the other workloads do not.
            "annotations": {
                SHUTDOWN_SECONDS: "8",
                CHECKPOINT_SECONDS: "5",
                CHECKPOINT_HANDSHAKE: "true",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 120,
            "subdomain": name,
            "nodeSelector": {POOL_LABEL: TRAIN_POOL},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                    "command": ["torchrun", f"--nnodes={size}", "--nproc-per-node=8", "train.py"],
                    "resources": {
                        "requests": {"cpu": "160", "memory": "1600Gi", GPU_RESOURCE: str(gpus)},
                        "limits": {GPU_RESOURCE: str(gpus)},
                    },
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "512Gi"}}],
        },
    }
    job: Obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "training", "labels": labels, "generation": 1},
        "spec": {
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": template,
        },
    }
    return Workload("batch/jobs", job, template, nodes)


def _inference(index: int, replicas: int, gpus: int, nodes: list[str]) -> Workload:
    name = f"{INFER_MODELS[index % len(INFER_MODELS)]}-{index:03d}"
    template_hash = name_suffix(name, 10)
    labels = {"app": name, "app.kubernetes.io/component": "inference"}
    template: Obj = {
        "metadata": {"labels": {**labels, "pod-template-hash": template_hash}},
        "spec": {
            "nodeSelector": {POOL_LABEL: INFER_POOL},
            "tolerations": [
                {
                    "key": INFERENCE_TAINT["key"],
                    "operator": "Equal",
                    "value": "inference",
                    "effect": "NoSchedule",
                },
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            ],
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": labels},
                }
            ],
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "server",
                    "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
                    "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"cpu": "8", "memory": "64Gi", GPU_RESOURCE: str(gpus)},
                        "limits": {GPU_RESOURCE: str(gpus)},
                    },
                    "volumeMounts": [{"name": "model-cache", "mountPath": "/models"}],
                }
            ],
            "volumes": [{"name": "model-cache", "emptyDir": {"sizeLimit": "200Gi"}}],
        },
    }
    deployment: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "inference", "labels": labels, "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": labels}, "spec": template["spec"]},
        },
    }
    replicaset: Obj = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-{template_hash}",
            "namespace": "inference",
            "labels": {**labels, "pod-template-hash": template_hash},
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "generation": 1,
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {**labels, "pod-template-hash": template_hash}},
            "template": template,
        },
    }
    budget: Obj = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{name}-pdb", "namespace": "inference", "generation": 1},
        "spec": {"minAvailable": replicas - 1, "selector": {"matchLabels": labels}},
    }
    return Workload(
        "apps/replicasets",
        replicaset,
        template,
        nodes,
        parents=[("apps/deployments", deployment)],
        budget=budget,
    )


def _evaluation(node: str, gpus: int) -> Workload:
    template: Obj = {
        "metadata": {
            "name": EVAL_POD,
            "namespace": "eval",
            "labels": {"app.kubernetes.io/name": "evaluator", OPT_OUT_LABEL: "true"},
            "annotations": {SHUTDOWN_SECONDS: "30"},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 120,
            "nodeSelector": {POOL_LABEL: TRAIN_POOL},
            "containers": [
                {
                    "name": "evaluator",
                    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                    "command": ["python", "eval.py", "--suite=full", "--resume"],
                    "resources": {
                        "requests": {"cpu": "64", "memory": "512Gi", GPU_RESOURCE: str(gpus)},
                        "limits": {GPU_RESOURCE: str(gpus)},
                    },
                }
            ],
        },
    }
    return Workload("pods", None, template, [node])


def plan(nodes: int, gpus_per_node: int = 8) -> FleetPlan:
    train_count, infer_count = pool_sizes(nodes)
    train = [f"{TRAIN_POOL}-{i:04d}" for i in range(train_count)]
    infer = [f"{INFER_POOL}-{i:04d}" for i in range(infer_count)]
    workloads: list[Workload] = []

    spares = train_count // 10
    gang_nodes = max(0, train_count - 1 - spares)
    start = 0
    for index, size in enumerate(_gangs(gang_nodes)):
        workloads.append(_training(index, size, train[start : start + size], gpus_per_node))
        start += size
    if train:
        workloads.append(_evaluation(train[-1], max(1, gpus_per_node // 2)))

    capacity = infer_count * gpus_per_node
    used = {name: 0 for name in infer}
    total = 0
    cursor = 0
    index = 0
    while infer:
        replicas = 3 + index % 2
        gpus = 2 if index % 3 == 2 else 1
        if total + replicas * gpus > capacity * INFERENCE_FILL:
            break
        chosen: list[str] = []
        for step in range(len(infer) * replicas):
            candidate = infer[(cursor + step) % len(infer)]
            spread_ok = candidate not in chosen or len(infer) < replicas
            if spread_ok and used[candidate] + gpus <= gpus_per_node:
                chosen.append(candidate)
                used[candidate] += gpus
                if len(chosen) == replicas:
                    break
        if len(chosen) < replicas:
            break
        cursor = (cursor + replicas) % len(infer)
        total += replicas * gpus
        workloads.append(_inference(index, replicas, gpus, chosen))
        index += 1

    daemonsets = [
        daemonset(
            "nvidia-dcgm-exporter",
            "gpu-operator",
            "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04",
            9400,
        ),
        daemonset(
            "node-problem-detector",
            "kube-system",
            "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.19",
            20257,
        ),
        agent_daemonset(),
    ]
    return FleetPlan(
        nodes=[(n, TRAIN_POOL) for n in train] + [(n, INFER_POOL) for n in infer],
        gpus_per_node=gpus_per_node,
        daemonsets=daemonsets,
        workloads=workloads,
        namespaces=NAMESPACES,
        pool_taints=POOL_TAINTS,
    )
