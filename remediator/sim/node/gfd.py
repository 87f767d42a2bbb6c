"""GPU feature discovery on a simulated node: the `nvidia.com/cuda.*` version labels NVIDIA's GFD
(run by the GPU operator on every GPU node) writes from NVML, here from the machine's hardware
profile (sim/node/hardware.py), so they agree with what `nvidia-smi` prints on the node. Every
node registers with the pool's versions (`SimCluster.set_feature_labels`); a fault that changes a
machine's driver relabels it, as GFD's next pass would (sim/faults/inject.py)."""

from __future__ import annotations

from remediator.sim.node.hardware import CUDA_VERSION, DRIVER_VERSION

DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
PREFIX = "nvidia.com/cuda."


def version_labels(driver: str = DRIVER_VERSION, cuda: str = CUDA_VERSION) -> dict[str, str]:
    """GFD's labels for a driver (`550.127.08`) and the CUDA version it supports (`12.4`)."""
    major, _, rest = driver.partition(".")
    minor, _, revision = rest.partition(".")
    cuda_major, _, cuda_minor = cuda.partition(".")
    labels = {
        DRIVER_FULL: driver,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
        "nvidia.com/cuda.runtime-version.full": cuda,
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
    }
    return {k: v for k, v in labels.items() if v}
