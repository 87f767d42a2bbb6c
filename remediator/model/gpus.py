"""GPU models and the node labels that name them: how one model is spelled by nvidia-smi
("NVIDIA H100 80GB HBM3") and by GPU feature discovery's `nvidia.com/gpu.product` label
("NVIDIA-H100-80GB-HBM3"), so a policy's NCCL floor is found whichever spelling a check, a node or
a person used; and the version labels GPU feature discovery keeps current on every GPU node, which
give each in-service node's driver without running anything on it.

Pure values and lookups; the validation step, the policy checks and the doctor share them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
CUDA_LABEL = "nvidia.com/cuda.runtime-version.full"
# GPU feature discovery before v0.15 labelled the parts only.
OLD_DRIVER_LABELS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor")
OLD_DRIVER_REV = "nvidia.com/cuda.driver.rev"
OLD_CUDA_LABELS = ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor")

# The models the shipped policies carry NCCL floors for, as nvidia-smi names them: what
# `remediator policy validate` checks a policy set against when it cannot see the cluster.
KNOWN_MODELS = (
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA B200",
    "NVIDIA GB200",
)


def model_key(model: str) -> str:
    """One spelling for both: GPU feature discovery writes the product name with its spaces as
    dashes (label values allow no spaces)."""
    return "-".join(model.split()).casefold()


def floor_for(floors: Mapping[str, float], model: str | None) -> float | None:
    """The floor a policy gives `model` under either spelling; None when it gives none."""
    if not model:
        return None
    wanted = model_key(model)
    return next((v for k, v in floors.items() if model_key(k) == wanted), None)


def without_floor(floors: Mapping[str, float], models: Iterable[str]) -> list[str]:
    """The models (each once, in order) that `floors` has no floor for."""
    missing: dict[str, str] = {}
    for model in models:
        if floor_for(floors, model) is None:
            missing.setdefault(model_key(model), model)
    return list(missing.values())


def labelled_versions(labels: Mapping[str, str]) -> dict[str, Any]:
    """What GPU feature discovery's labels say a node runs, under the inventory's keys
    (actions/inventory.py): the driver and the CUDA version it supports, the values that drift
    across a fleet. Only what the labels hold; a node without them says nothing. (The GPU count
    is left to validations: a machine short of a GPU is failed by DCGM, which names the GPU.)"""
    found: dict[str, Any] = {}
    driver = labels.get(DRIVER_LABEL)
    if not driver and all(labels.get(k) for k in OLD_DRIVER_LABELS):
        parts = [labels[k] for k in OLD_DRIVER_LABELS]
        driver = ".".join(parts + ([labels[OLD_DRIVER_REV]] if labels.get(OLD_DRIVER_REV) else []))
    if driver:
        found["driver"] = driver
    cuda = labels.get(CUDA_LABEL)
    if not cuda and all(labels.get(k) for k in OLD_CUDA_LABELS):
        cuda = ".".join(labels[k] for k in OLD_CUDA_LABELS)
    if cuda:
        found["cuda"] = cuda
    return found
