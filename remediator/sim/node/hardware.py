"""Each simulated machine's hardware: GPU model and count, every GPU's UUID, board serial and PCI
bus id, the driver, CUDA and VBIOS versions, its InfiniBand HCAs and the NVLink fabric's
all-reduce bandwidth — what `nvidia-smi`, `ibstat`, `all_reduce_perf`, the DCGM exporter's labels
and the driver's /proc files all report, so they agree with each other.

Identities belong to the machine, which is the Node object: a reset or a reboot keeps the same
object and so the same UUIDs and serials; a replacement is a new object (a new uid) and gets new
ones, even under a reused name (a GCE MIG recreates an instance under its old name). They are
derived from the node name and how many machines have held that name in this process, so a seeded
fleet has the same identities in every run.

The hardware conditions injected as faults live here too, where they survive a reboot as the real
ones would: a degraded NVLink fabric (a bandwidth fraction) and a driver or VBIOS that differs
from the pool's. GPU and link faults that the telemetry shows (an XID, a GPU gone, a port down)
stay in the telemetry, which the programs also read.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from dataclasses import dataclass, replace

_UUID_NAMESPACE = uuid.UUID("5f3f3c52-8a3c-4d61-9a39-3e0f6c1b7a10")

DEFAULT_MODEL = "NVIDIA H100 80GB HBM3"
DRIVER_VERSION = "550.127.08"
CUDA_VERSION = "12.4"
# The CUDA version a driver branch supports, as nvidia-smi's header reports it.
CUDA_OF_BRANCH = {"525": "12.0", "535": "12.2", "545": "12.3", "550": "12.4", "560": "12.6"}
CUDA_OF_BRANCH.update({"565": "12.7", "570": "12.8", "575": "12.9", "580": "13.0"})

# HGX baseboard PCI addresses, in GPU index order.
HGX_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")

IB_CA_TYPE = "MT4129"  # ConnectX-7
IB_FIRMWARE = "28.39.1002"
IB_RATE = 400  # NDR, Gb/s
IB_CAPABILITY_MASK = "0xa651e848"


@dataclass(frozen=True)
class GpuModel:
    memory_mib: int
    device_id: str  # the PCI device id DCGM reports
    vbios: str
    power_limit_w: int
    nvlink_busbw: float  # GB/s: all_reduce_perf's large-message bus bandwidth on a healthy node


GPU_MODELS: dict[str, GpuModel] = {
    "NVIDIA H100 80GB HBM3": GpuModel(81559, "2330", "96.00.99.00.01", 700, 480.0),
    "NVIDIA H200": GpuModel(143771, "2335", "96.00.A5.00.01", 700, 480.0),
    "NVIDIA A100-SXM4-80GB": GpuModel(81920, "20B2", "92.00.36.00.02", 400, 230.0),
}
# A model the table does not know: a PCIe card, whose GPUs talk over the host bridge.
GENERIC_MODEL = GpuModel(46068, "26B9", "95.02.18.80.01", 300, 20.0)


def model_spec(model: str) -> GpuModel:
    return GPU_MODELS.get(model, GENERIC_MODEL)


def cuda_of(driver: str) -> str:
    return CUDA_OF_BRANCH.get(driver.split(".", 1)[0], CUDA_VERSION)


def pci_bus_id(index: int) -> str:
    bus = HGX_BUS_IDS[index] if index < len(HGX_BUS_IDS) else f"{0x20 + index * 0x10:02X}"
    return f"00000000:{bus}:00.0"


def _name_digest(key: str) -> bytes:
    """SHA-1 of the namespace and the name: the digest a version-5 UUID is cut from (RFC 4122,
    as uuid.uuid5 computes it, without its object overhead: a 10,000-node fleet makes 80,000)."""
    return hashlib.sha1(_UUID_NAMESPACE.bytes + key.encode(), usedforsecurity=False).digest()


def _uuid5(digest: bytes) -> str:
    raw = bytearray(digest[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _gpu_key(node: str, index: int, generation: int) -> str:
    return f"{node}/{index}" if generation == 0 else f"{node}#{generation}/{index}"


def gpu_uuid(node: str, index: int, generation: int = 0) -> str:
    """Generation 0 (the first machine of a name) keeps the name-and-index identity the
    telemetry has always had; each later machine under that name gets its own."""
    return f"GPU-{_uuid5(_name_digest(_gpu_key(node, index, generation)))}"


def board_serial(node: str, index: int, generation: int = 0) -> str:
    """13 digits, as NVIDIA prints a board serial (`nvidia-smi --query-gpu=serial`)."""
    digest = _name_digest(_gpu_key(node, index, generation))
    return f"1654{int.from_bytes(digest[16:20]) % 10**9:09d}"


def _digits(key: str, count: int) -> int:
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 10**count


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    serial: str
    pci_bus_id: str


@dataclass(frozen=True)
class IbPort:
    device: str  # the HCA, mlx5_N
    port: int
    node_guid: str
    lid: int


@dataclass(frozen=True)
class Profile:
    """One machine. `nvlink_fraction` below 1 is a degraded fabric; the versions are what is
    installed now (a fault can make them differ from `model`'s and the pool's)."""

    node: str
    uid: str
    generation: int
    model: str
    gpus: tuple[Gpu, ...]
    ib_ports: tuple[IbPort, ...]
    driver_version: str = DRIVER_VERSION
    cuda_version: str = CUDA_VERSION
    vbios_version: str = ""
    nvlink_fraction: float = 1.0

    @property
    def machine_serial(self) -> str:
        """The board's DMI serial (/sys/class/dmi/id/product_serial): kept through a repair,
        new with a replacement, like the GPUs' UUIDs."""
        return f"SIM{_digits(f'dmi/{self.node}/{self.generation}', 10):010d}"

    @property
    def spec(self) -> GpuModel:
        return model_spec(self.model)

    @property
    def nvlink_busbw(self) -> float:
        return self.spec.nvlink_busbw * self.nvlink_fraction

    def gpu(self, index: int) -> Gpu:
        return self.gpus[index]


def _gpu(node: str, index: int, generation: int) -> Gpu:
    """One digest per GPU gives both its UUID and its serial."""
    digest = _name_digest(_gpu_key(node, index, generation))
    return Gpu(
        index=index,
        uuid=f"GPU-{_uuid5(digest)}",
        serial=f"1654{int.from_bytes(digest[16:20]) % 10**9:09d}",
        pci_bus_id=pci_bus_id(index),
    )


def build_profile(node: str, uid: str, generation: int, model: str, gpus: int) -> Profile:
    guid_base = _digits(f"guid/{node}/{generation}", 6)
    return Profile(
        node=node,
        uid=uid,
        generation=generation,
        model=model,
        gpus=tuple(_gpu(node, i, generation) for i in range(gpus)),
        # One HCA per GPU (a rail-optimised HGX node); a single-port ConnectX-7's port GUID is
        # its node GUID.
        ib_ports=tuple(
            IbPort(
                device=f"mlx5_{i}",
                port=1,
                node_guid=f"0x946dae0300{(guid_base * 16 + i) % 16**6:06x}",
                lid=1 + (guid_base + i * 97) % 48000,
            )
            for i in range(gpus)
        ),
        vbios_version=model_spec(model).vbios,
    )


@dataclass
class _Held:
    profile: Profile
    generations: int = 1  # machines that have held this name


class Hardware:
    """Every node's profile, made when a node is first asked about. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, _Held] = {}

    def profile(self, node: str, uid: str, model: str, gpus: int) -> Profile:
        """The machine that is Node `node` with this uid; a new uid is a new machine. A change
        of model or GPU count (a node re-labelled by a test) rebuilds the same machine."""
        with self._lock:
            held = self._held.get(node)
            if held is None:
                held = self._held[node] = _Held(build_profile(node, uid, 0, model, gpus))
            elif held.profile.uid != uid:
                generation = held.generations
                held.generations += 1
                held.profile = build_profile(node, uid, generation, model, gpus)
            elif (held.profile.model, len(held.profile.gpus)) != (model, gpus):
                current = held.profile
                held.profile = replace(
                    build_profile(node, uid, current.generation, model, gpus),
                    nvlink_fraction=current.nvlink_fraction,
                )
            return held.profile

    def current(self, node: str) -> Profile | None:
        with self._lock:
            held = self._held.get(node)
            return held.profile if held else None

    def _change(self, node: str, **changes: object) -> Profile:
        with self._lock:
            held = self._held.get(node)
            if held is None:
                raise KeyError(node)
            held.profile = replace(held.profile, **changes)  # type: ignore[arg-type]
            return held.profile

    def slow_nvlink(self, node: str, fraction: float) -> Profile:
        return self._change(node, nvlink_fraction=fraction)

    def versions(
        self, node: str, driver: str | None, vbios: str | None, cuda: str | None
    ) -> Profile:
        current = self.current(node)
        if current is None:
            raise KeyError(node)
        return self._change(
            node,
            driver_version=driver or current.driver_version,
            cuda_version=cuda or (cuda_of(driver) if driver else current.cuda_version),
            vbios_version=vbios or current.vbios_version,
        )

    def repair(self, node: str) -> None:
        """What a technician's fix restores: full NVLink bandwidth and the pool's versions."""
        current = self.current(node)
        if current is None:
            return
        self._change(
            node,
            nvlink_fraction=1.0,
            driver_version=DRIVER_VERSION,
            cuda_version=CUDA_VERSION,
            vbios_version=current.spec.vbios,
        )

    def faults(self, node: str) -> list[dict[str, object]]:
        """The hardware conditions a profile carries, as the inject API lists faults."""
        p = self.current(node)
        if p is None:
            return []
        found: list[dict[str, object]] = []
        if p.nvlink_fraction < 1.0:
            found.append({"node": node, "type": "nvlink_slow", "fraction": p.nvlink_fraction})
        if (p.driver_version, p.cuda_version, p.vbios_version) != (
            DRIVER_VERSION,
            CUDA_VERSION,
            p.spec.vbios,
        ):
            found.append(
                {
                    "node": node,
                    "type": "versions",
                    "driver_version": p.driver_version,
                    "cuda_version": p.cuda_version,
                    "vbios_version": p.vbios_version,
                }
            )
        return found
