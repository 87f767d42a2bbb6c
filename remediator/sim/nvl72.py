"""The NVL72 fleet (`sim serve --topology nvl72`): racks of GB200 NVL72, each one NVLink domain of
18 four-GPU compute trays (the Nodes) joined by 9 NVSwitch trays (simulator objects, not Nodes),
with the labels GPU feature discovery and the rack labeller put on each tray, the last trays of
each rack held back as spares, and one training gang per clique that Kubernetes keeps inside the
clique with required pod affinity on `nvidia.com/gpu.clique`.

Pure and derived from its arguments alone, like `fleet.plan`: every run of the same size is the
same cluster (cluster UUIDs and switch serials included). The racks themselves are
sim/rack/topology.py's; this module adds what runs on them."""

from __future__ import annotations

from remediator.sim.fleet import daemonset
from remediator.sim.kube.api.kobj import (
    CHECKPOINT_HANDSHAKE,
    CHECKPOINT_SECONDS,
    GANG_LABEL,
    GPU_RESOURCE,
    SHUTDOWN_SECONDS,
)
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import FleetPlan, Workload
from remediator.sim.rack.topology import (
    CLIQUE_LABEL,
    GANG_JOB_LABEL,
    GPUS_PER_TRAY,
    NAMESPACES,
    POOL,
    TOPOLOGIES,
    Rack,
    cluster_uuid,
    gang_name,
    layout,
    positions,
    tray_labels,
    tray_taints,
)

__all__ = ["POOL", "TOPOLOGIES", "cluster_uuid", "gangs", "layout", "plan", "positions"]
GANG_NAMESPACE = "training"


def _gang(rack: int, clique: int, size: int) -> Workload:
    name = gang_name(rack, clique)
    labels = {GANG_JOB_LABEL: name, GANG_LABEL: name, "app.kubernetes.io/name": "trainer"}
    template: Obj = {
        "metadata": {
            "labels": labels,
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
            "affinity": {
                "podAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {GANG_JOB_LABEL: name}},
                            "topologyKey": CLIQUE_LABEL,
                        }
                    ]
                }
            },
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "command": [
                        "torchrun",
                        f"--nnodes={size}",
                        f"--nproc-per-node={GPUS_PER_TRAY}",
                        "train.py",
                    ],
                    "resources": {
                        "requests": {
                            "cpu": "64",
                            "memory": "800Gi",
                            GPU_RESOURCE: str(GPUS_PER_TRAY),
                        },
                        "limits": {GPU_RESOURCE: str(GPUS_PER_TRAY)},
                    },
                }
            ],
        },
    }
    job: Obj = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": GANG_NAMESPACE, "labels": labels, "generation": 1},
        "spec": {
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": template,
        },
    }
    return Workload("batch/jobs", job, template, [])


def gangs(racks: list[Rack]) -> list[Workload]:
    """Per clique its gang, running on the clique's non-spare trays."""
    out = []
    for rack in racks:
        for clique in rack.cliques():
            trays = [t.name for t in rack.trays if t.clique == clique and not t.spare]
            if trays:
                workload = _gang(rack.index, clique, len(trays))
                workload.nodes.extend(trays)
                out.append(workload)
    return out


def plan(racks: int, cliques_per_rack: int = 1, spare_trays: int = 2) -> FleetPlan:
    layout_ = layout(racks, cliques_per_rack, spare_trays)
    trays = [t for rack in layout_ for t in rack.trays]
    daemonsets = [
        daemonset(
            "nvidia-dcgm-exporter",
            "gpu-operator",
            "nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1-4.0.4-ubuntu22.04",
            9400,
        ),
        daemonset(
            "node-problem-detector",
            "kube-system",
            "registry.k8s.io/node-problem-detector/node-problem-detector:v0.8.19",
            20257,
        ),
    ]
    return FleetPlan(
        nodes=[(t.name, POOL) for t in trays],
        gpus_per_node=GPUS_PER_TRAY,
        daemonsets=daemonsets,
        workloads=gangs(layout_),
        namespaces=NAMESPACES,
        node_labels={t.name: tray_labels(t) for t in trays},
        node_taints={t.name: tray_taints(t) for t in trays if t.spare},
    )
