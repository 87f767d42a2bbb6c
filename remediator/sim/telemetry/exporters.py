"""GPU and InfiniBand telemetry for every simulated node, in Prometheus text exposition 0.0.4.

One endpoint stands in for a fleet of NVIDIA dcgm-exporters plus node_exporter's `infiniband`
collector, so production code can scrape it exactly as it scrapes the real ones. The node list and
each node's GPU count come from the simulated API server's store: a node that disappears stops
exporting, a new one starts. Values are functions of the clock, not of the scrape count: gauges
drift around seeded per-GPU baselines (smooth and bounded), counters only grow, and an injected
fault changes the state that those functions read. A render is cached per time step, so many
scrapers within one step cost one render.

The real exporters learn the node from the scrape target; one combined endpoint cannot, so the
DCGM series carry `Hostname` (as dcgm-exporter does) and the InfiniBand series an extra `node`
label. `GET /metrics?node=NAME` serves one node, for a scrape config with a target per node.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from remediator.clock import Clock
from remediator.sim.kube.api.store import Obj, ObjectStore, WatchEvent

# Re-exported: the GPU identities the simulator's users (agents, benches) have named from here.
from remediator.sim.node.hardware import DEFAULT_MODEL, GPU_MODELS, Hardware, Profile
from remediator.sim.node.hardware import DRIVER_VERSION as DRIVER_VERSION
from remediator.sim.node.hardware import gpu_uuid as gpu_uuid
from remediator.sim.node.hardware import pci_bus_id as pci_bus_id

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# dcgm-exporter's err_msg texts (NVIDIA's XID catalog names) for the codes a fleet meets most.
XID_MESSAGES: dict[int, str] = {
    0: "No Error",
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: (
        "Preemptive cleanup, due to previous errors -- "
        "Most likely to see when running multiple cuda"
    ),
    46: "GPU stopped processing",
    48: "Double Bit ECC Error",
    54: "Auxiliary power is not connected to the GPU board",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link Error",
    136: "ALI Training Fail",
    140: "Unrecovered ECC Error",
    143: "GPU Initialization Failure",
    144: "NVLINK: Saw Error",
    145: "NVLINK: RLW Error",
    146: "NVLINK: TLW Error",
    147: "NVLINK: TREX Error",
    148: "NVLINK: NVLPW_CTRL Error",
    149: "NVLINK: NETIR Error",
    150: "NVLINK: MSE Error",
    154: "GPU Recovery Action Changed",
    155: "NVLINK: SW Defined Error",
    156: "Resource Retirement Event",
    158: "GPU Fatal Timeout",
}
UNKNOWN_XID = "Unknown Error"
XID_OFF_BUS = 79

# Clock event reason bits (nvmlClocksEventReasons).
CLOCKS_SW_POWER_CAP = 0x4
CLOCKS_SW_THERMAL = 0x20
CLOCKS_HW_THERMAL = 0x40
SW_THERMAL_CELSIUS = 85.0
HW_THERMAL_CELSIUS = 92.0

IB_STATE_ACTIVE, IB_STATE_DOWN = 4, 1
IB_PHYS_LINK_UP, IB_PHYS_DISABLED = 5, 3

# (name, type, help) in dcgm-exporter's words. Index constants below address these rows.
GPU_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons."),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink data CRC errors.",
    ),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
    ),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending"),
)
F_XID, F_TEMP, F_MEMTEMP, F_POWER, F_UTIL, F_TENSOR, F_CLOCKS = range(7)
F_NVLINK = 7  # four NVLink counters: flit, data, replay, recovery
F_SBE, F_DBE_VOL, F_DBE_AGG, F_REMAPPED, F_REMAP_FAILURE, F_REMAP_PENDING = range(11, 17)
ERROR_FAMILIES = tuple(range(F_NVLINK, F_REMAP_PENDING + 1))

_NODE_NOTE = " (simulator: the node label names the node, as one endpoint serves every node)"
IB_FAMILIES: tuple[tuple[str, str, str], ...] = (
    (
        "node_infiniband_state_id",
        "gauge",
        "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, "
        "5: act defer)",
    ),
    (
        "node_infiniband_physical_state_id",
        "gauge",
        "Physical state of the InfiniBand port (0: no change, 1: sleep, 2: polling, 3: disable, "
        "4: shift, 5: link up, 6: link error recover, 7: phytest)",
    ),
    (
        "node_infiniband_link_downed_total",
        "counter",
        "Number of times the link failed to recover from an error state and went down",
    ),
    (
        "node_infiniband_link_error_recovery_total",
        "counter",
        "Number of times the link successfully recovered from an error state",
    ),
    (
        "node_infiniband_symbol_error_total",
        "counter",
        "Number of minor link errors detected on one or more physical lanes.",
    ),
    (
        "node_infiniband_port_errors_received_total",
        "counter",
        "Number of packets containing an error that were received on this port",
    ),
    (
        "node_infiniband_local_link_integrity_errors_total",
        "counter",
        "Number of times that the count of local physical errors exceeded the threshold "
        "specified by LocalPhyErrors.",
    ),
    (
        "node_infiniband_excessive_buffer_overrun_errors_total",
        "counter",
        "Number of times that OverrunErrors consecutive flow control update periods occurred, "
        "each having at least one overrun error.",
    ),
    (
        "node_infiniband_port_transmit_wait_total",
        "counter",
        "Number of ticks during which the port had data to transmit but no data was sent during "
        "the entire tick",
    ),
    (
        "node_infiniband_port_data_received_bytes_total",
        "counter",
        "Number of data octets received on all links",
    ),
    (
        "node_infiniband_port_data_transmitted_bytes_total",
        "counter",
        "Number of data octets transmitted on all links",
    ),
)
(
    I_STATE,
    I_PHYS,
    I_DOWNED,
    I_RECOVERY,
    I_SYMBOL,
    I_RCV_ERR,
    I_INTEGRITY,
    I_OVERRUN,
    I_WAIT,
    I_RX,
    I_TX,
) = range(11)


def xid_message(code: int) -> str:
    return XID_MESSAGES.get(code, UNKNOWN_XID)


def clock_event_reasons(temp: float, power_capped: bool) -> int:
    reasons = CLOCKS_SW_POWER_CAP if power_capped else 0
    if temp >= SW_THERMAL_CELSIUS:
        reasons |= CLOCKS_SW_THERMAL
    if temp >= HW_THERMAL_CELSIUS:
        reasons |= CLOCKS_HW_THERMAL
    return reasons


@dataclass
class Ramp:
    """A linear move from `start` to `target` at `rate` per second from time `since`, then held:
    how a GPU heats up after its cooling fails, and cools down once it is fixed."""

    since: float = 0.0
    start: float = 0.0
    target: float = 0.0
    rate: float = 1.0

    def at(self, t: float) -> float:
        distance = self.target - self.start
        moved = self.rate * max(0.0, t - self.since)
        if moved >= abs(distance):
            return self.target
        return self.start + math.copysign(moved, distance)


@dataclass
class Wave:
    """Two sinusoids, a slow swing and a faster ripple: smooth, and never beyond `slow + fast`."""

    slow: float
    slow_omega: float
    slow_phase: float
    fast: float
    fast_omega: float
    fast_phase: float

    @classmethod
    def seeded(cls, rng: random.Random, slow: float, fast: float) -> Wave:
        return cls(
            slow=slow * rng.uniform(0.6, 1.0),
            slow_omega=2 * math.pi / rng.uniform(120.0, 600.0),
            slow_phase=rng.uniform(0.0, 2 * math.pi),
            fast=fast * rng.uniform(0.6, 1.0),
            fast_omega=2 * math.pi / rng.uniform(15.0, 45.0),
            fast_phase=rng.uniform(0.0, 2 * math.pi),
        )

    def at(self, t: float) -> float:
        return self.slow * math.sin(self.slow_omega * t + self.slow_phase) + self.fast * math.sin(
            self.fast_omega * t + self.fast_phase
        )


@dataclass
class GpuState:
    index: int
    labels: str  # the rendered label set, without braces
    base_temp: float
    memory_offset: float
    base_util: float
    base_tensor: float
    temp_wave: Wave
    util_wave: Wave
    heat: Ramp = field(default_factory=Ramp)
    heat_target: float | None = None  # °C while an overheat fault holds
    xid: int = 0
    off_bus: bool = False
    missing: bool = False
    nvlink: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    sbe_vol: int = 0
    dbe_vol: int = 0
    dbe_agg: int = 0
    remapped_rows: int = 0
    remap_failure: int = 0
    remap_pending: int = 0
    static: tuple[str, ...] | None = None  # rendered XID + counter lines; None after any change

    @property
    def healthy_on_bus(self) -> bool:
        return not (self.missing or self.off_bus)

    def temperature(self, t: float) -> float:
        return self.base_temp + self.temp_wave.at(t) + self.heat.at(t)


@dataclass
class IbPortState:
    device: str
    port: str
    labels: str
    rx_rate: float  # bytes/s while the link is up
    tx_rate: float
    wait_rate: float  # transmit-wait ticks/s while up
    symbol_rate: float  # background symbol errors/s while up (most ports: none)
    up_since: float | None
    up_before: float = 0.0  # seconds of link-up time before the current up period
    link_downed: int = 0
    link_recovery: int = 0
    symbol_errors: int = 0

    def up_time(self, t: float) -> float:
        if self.up_since is None:
            return self.up_before
        return self.up_before + max(0.0, t - self.up_since)

    def set_up(self, up: bool, t: float) -> None:
        if up and self.up_since is None:
            self.up_since = t
        elif not up and self.up_since is not None:
            self.up_before = self.up_time(t)
            self.up_since = None
            self.link_downed += 1


@dataclass
class NodeState:
    name: str
    uid: str
    gpu_count: int
    model: str
    gpus: list[GpuState]
    ports: list[IbPortState]


@dataclass(frozen=True)
class Inventory:
    """A machine and its parts' state: GPUs gone from the bus, InfiniBand ports down."""

    profile: Profile
    absent_gpus: frozenset[int]
    down_ports: frozenset[str]


def node_gpu_count(node: Obj) -> int:
    status = node.get("status") or {}
    raw = (status.get("capacity") or {}).get(GPU_RESOURCE) or (status.get("allocatable") or {}).get(
        GPU_RESOURCE
    )
    try:
        return max(0, int(raw)) if raw is not None else 0
    except (TypeError, ValueError):
        return 0


def node_model(node: Obj) -> str:
    """GPU feature discovery writes the product with dashes for spaces; DCGM reports the name
    as nvidia-smi does, whose own dashes stay ("NVIDIA A100-SXM4-80GB")."""
    product = ((node.get("metadata") or {}).get("labels") or {}).get(PRODUCT_LABEL)
    if not product:
        return DEFAULT_MODEL
    known = {name.replace(" ", "-"): name for name in GPU_MODELS}
    return known.get(product, product.replace("-", " "))


def gpu_labels(profile: Profile, index: int, name: str) -> str:
    """dcgm-exporter's label set for one GPU, from the machine's hardware profile."""
    gpu = profile.gpus[index]
    return (
        f'gpu="{index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",'
        f'device="nvidia{index}",modelName="{profile.model}",Hostname="{name}",'
        f'DCGM_FI_DRIVER_VERSION="{profile.driver_version}"'
    )


def new_node_state(
    name: str, uid: str, gpus: int, model: str, born: float, seed: int, profile: Profile
) -> NodeState:
    """Seeded per node name: the same fleet drifts the same way in every run."""
    rng = random.Random(f"{seed}/{name}")
    gpu_states = []
    for index in range(gpus):
        gpu_states.append(
            GpuState(
                index=index,
                labels=gpu_labels(profile, index, name),
                base_temp=rng.uniform(46.0, 60.0),
                memory_offset=rng.uniform(4.0, 9.0),
                base_util=rng.uniform(82.0, 96.0),
                base_tensor=rng.uniform(0.30, 0.55),
                temp_wave=Wave.seeded(rng, slow=2.0, fast=0.8),
                util_wave=Wave.seeded(rng, slow=4.0, fast=2.0),
            )
        )
    ports = []
    for hca in profile.ib_ports:
        device = hca.device
        noisy = rng.random() < 0.05
        ports.append(
            IbPortState(
                device=device,
                port=str(hca.port),
                labels=f'device="{device}",port="{hca.port}",node="{name}"',
                rx_rate=rng.uniform(8e9, 30e9),
                tx_rate=rng.uniform(8e9, 30e9),
                wait_rate=rng.uniform(1e4, 5e5),
                # A few ports see a trickle of symbol errors, far below ~120 an hour.
                symbol_rate=rng.uniform(1.0, 10.0) / 3600.0 if noisy else 0.0,
                up_since=born,
            )
        )
    return NodeState(name=name, uid=uid, gpu_count=gpus, model=model, gpus=gpu_states, ports=ports)


def render_families(
    families: Iterable[tuple[str, str, str]], lines: list[list[str]], out: list[str]
) -> None:
    for (name, kind, help_text), samples in zip(families, lines, strict=True):
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        if samples:
            # One join per family: the name goes in as the separator, not into every sample.
            prefix = name + "{"
            out.append(prefix + ("\n" + prefix).join(samples))


def gpu_samples(gpu: GpuState, t: float, lines: list[list[str]]) -> None:
    """Append one GPU's samples (`labels} value`) to each family's lines."""
    labels = gpu.labels
    static = static_samples(gpu)
    lines[F_XID].append(static[0])
    if gpu.off_bus:
        return
    temp = gpu.temperature(t)
    wave = gpu.util_wave.at(t)
    util = min(100.0, max(0.0, gpu.base_util + wave))
    tensor = min(1.0, max(0.0, gpu.base_tensor + wave / 100.0))
    power = 95.0 + 5.6 * util + 1.5 * (temp - gpu.base_temp)
    capped = power > 640.0
    power = min(power, 700.0)
    suffix = labels + "} "
    lines[F_TEMP].append(suffix + str(round(temp)))
    lines[F_MEMTEMP].append(suffix + str(round(temp + gpu.memory_offset)))
    lines[F_POWER].append(f"{suffix}{power:.3f}")
    lines[F_UTIL].append(suffix + str(round(util)))
    lines[F_TENSOR].append(f"{suffix}{tensor:.6f}")
    lines[F_CLOCKS].append(suffix + str(clock_event_reasons(temp, capped)))
    for family, line in zip(ERROR_FAMILIES, static[1:], strict=True):
        lines[family].append(line)


def static_samples(gpu: GpuState) -> tuple[str, ...]:
    """The XID line and the error counters: they change only with a fault, so they are rendered
    once per change rather than once per scrape."""
    if gpu.static is None:
        xid = gpu.xid
        suffix = gpu.labels + "} "
        counters = (
            *gpu.nvlink,
            gpu.sbe_vol,
            gpu.dbe_vol,
            gpu.dbe_agg,
            gpu.remapped_rows,
            gpu.remap_failure,
            gpu.remap_pending,
        )
        gpu.static = (
            f'{gpu.labels},err_code="{xid}",err_msg="{xid_message(xid)}"}} {xid}',
            *(suffix + str(value) for value in counters),
        )
    return gpu.static


def port_samples(port: IbPortState, t: float, lines: list[list[str]]) -> None:
    up = port.up_since is not None
    uptime = port.up_time(t)
    suffix = port.labels + "} "
    lines[I_STATE].append(suffix + str(IB_STATE_ACTIVE if up else IB_STATE_DOWN))
    lines[I_PHYS].append(suffix + str(IB_PHYS_LINK_UP if up else IB_PHYS_DISABLED))
    lines[I_DOWNED].append(suffix + str(port.link_downed))
    lines[I_RECOVERY].append(suffix + str(port.link_recovery))
    lines[I_SYMBOL].append(suffix + str(port.symbol_errors + int(port.symbol_rate * uptime)))
    lines[I_RCV_ERR].append(suffix + "0")
    lines[I_INTEGRITY].append(suffix + "0")
    lines[I_OVERRUN].append(suffix + "0")
    lines[I_WAIT].append(suffix + str(int(port.wait_rate * uptime)))
    lines[I_RX].append(suffix + str(int(port.rx_rate * uptime)))
    lines[I_TX].append(suffix + str(int(port.tx_rate * uptime)))


class UnknownNode(LookupError):
    pass


class Telemetry:
    """The per-GPU and per-port state of the fleet, and its exposition.

    Thread-safe: the metrics app renders in a worker thread while the inject app changes state.
    Times are seconds since this object was made, on the given clock.
    """

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        seed: int = 0,
        step_seconds: float = 1.0,
        hardware: Hardware | None = None,
    ) -> None:
        # The machines' identities and versions, which the host programs read too.
        self.hardware = hardware or Hardware()
        self._store = store
        self._clock = clock
        self._seed = seed
        self._step = step_seconds
        self._epoch = clock.now()
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeState] = {}
        self._version = 0  # bumped by every fault and every node event
        self._cache_key: tuple[float, int] | None = None
        self._cache: dict[str | None, bytes] = {}
        # More exposition after the GPU and port families (an NVL72 rack's per-link NVLink
        # fields): each gets the nodes rendered and returns its lines.
        self._sections: list[Callable[[list[NodeState]], list[str]]] = []
        store.subscribe("nodes", self._on_node_event)

    def add_section(self, render: Callable[[list[NodeState]], list[str]]) -> None:
        with self._lock:
            self._sections.append(render)
            self._version += 1

    def changed(self) -> None:
        """State behind a section changed: the next scrape renders afresh."""
        with self._lock:
            self._version += 1

    def _on_node_event(self, _event: WatchEvent) -> None:
        self._version += 1

    def now(self) -> float:
        return (self._clock.now() - self._epoch).total_seconds()

    # -- state -------------------------------------------------------------------------------

    def _sync(self, nodes: list[Obj], t: float) -> list[NodeState]:
        """Bring the state in line with the store: new nodes start, gone (or re-created) ones go."""
        present: dict[str, NodeState] = {}
        for node in nodes:
            meta = node.get("metadata") or {}
            name, uid = meta.get("name", ""), meta.get("uid", "")
            gpus, model = node_gpu_count(node), node_model(node)
            state = self._nodes.get(name)
            if state is None or state.uid != uid or (state.gpu_count, state.model) != (gpus, model):
                profile = self.hardware.profile(name, uid, model, gpus)
                state = new_node_state(name, uid, gpus, model, t, self._seed, profile)
            present[name] = state
        self._nodes = present
        return [present[name] for name in sorted(present)]

    def node(self, name: str) -> NodeState:
        """The state of one node, made now if it has not been seen yet (UnknownNode if absent)."""
        with self._lock:
            found = self._store.find("nodes", "", name)
            if found is None:
                raise UnknownNode(name)
            state = self._nodes.get(name)
            meta = found.get("metadata") or {}
            if state is None or state.uid != meta.get("uid", ""):
                uid, gpus, model = meta.get("uid", ""), node_gpu_count(found), node_model(found)
                profile = self.hardware.profile(name, uid, model, gpus)
                state = new_node_state(name, uid, gpus, model, self.now(), self._seed, profile)
                self._nodes[name] = state
            return state

    # -- faults ------------------------------------------------------------------------------

    def _gpus(self, node: str, gpu: int | None) -> list[GpuState]:
        state = self.node(node)
        if gpu is None:
            return state.gpus
        if not 0 <= gpu < state.gpu_count:
            raise ValueError(
                f"node {node} has {state.gpu_count} GPUs"
                + (f" (0-{state.gpu_count - 1})" if state.gpu_count else "")
                + f"; there is no GPU {gpu}"
            )
        return [state.gpus[gpu]]

    def _port(self, node: str, device: str) -> IbPortState:
        state = self.node(node)
        for port in state.ports:
            if port.device == device:
                return port
        names = ", ".join(p.device for p in state.ports) or "none"
        raise ValueError(f"node {node} has no InfiniBand device {device} (it has: {names})")

    def xid(self, node: str, gpu: int, code: int) -> None:
        """Report an XID as the driver would, with the counters that accompany it."""
        with self._lock:
            (state,) = self._gpus(node, gpu)
            state.xid = code
            state.static = None
            if code == XID_OFF_BUS:
                state.off_bus = True
            elif code in (48, 94, 95):  # double-bit ECC: contained or not, a row gets remapped
                state.dbe_vol += 1
                state.dbe_agg += 1
                state.remapped_rows += 1
                state.remap_pending = 1
            elif code == 63:
                state.remapped_rows += 1
                state.remap_pending = 1
            elif code == 64:
                state.remap_failure = 1
            elif code == 92:
                state.sbe_vol += 1000
            elif code == 74 or 144 <= code <= 150:
                state.nvlink[2] += 10
                state.nvlink[3] += 1
            self._version += 1

    def row_remap_pending(self, node: str, gpu: int) -> None:
        """A row remapped after a correctable error, waiting for the GPU's reset to take effect:
        DCGM_FI_DEV_ROW_REMAP_PENDING reads 1 until then (no XID: the remap succeeded)."""
        with self._lock:
            (state,) = self._gpus(node, gpu)
            state.static = None
            state.remapped_rows += 1
            state.remap_pending = 1
            self._version += 1

    def heat(self, node: str, gpu: int | None, celsius: float, rate: float) -> list[int]:
        """Overheating: the temperature climbs toward `celsius` at `rate` °C/s and holds there."""
        with self._lock:
            t = self.now()
            gpus = self._gpus(node, gpu)
            for state in gpus:
                current = state.heat.at(t)
                state.heat = Ramp(t, current, celsius - state.base_temp, rate)
                state.heat_target = celsius
            self._version += 1
            return [g.index for g in gpus]

    def nvlink_errors(self, node: str, gpu: int, count: int) -> None:
        """A burst on the GPU's links: CRC errors, the retries they cause, and one recovery."""
        with self._lock:
            (state,) = self._gpus(node, gpu)
            state.static = None
            state.nvlink[0] += count
            state.nvlink[1] += (count + 1) // 2
            state.nvlink[2] += count
            state.nvlink[3] += 1
            self._version += 1

    def ib_link(self, node: str, device: str, up: bool) -> None:
        """Down: state 1, physical state 3, link_downed +1, and the data counters stand still."""
        with self._lock:
            port = self._port(node, device)
            if up and port.up_since is None:
                port.link_recovery += 1
            port.set_up(up, self.now())
            self._version += 1

    def ib_symbol_errors(self, node: str, device: str, count: int) -> None:
        with self._lock:
            self._port(node, device).symbol_errors += count
            self._version += 1

    def gpu_missing(self, node: str, gpu: int) -> None:
        """The GPU is gone from the node: all its series vanish, as if the exporter never saw it."""
        with self._lock:
            (state,) = self._gpus(node, gpu)
            state.missing = True
            self._version += 1

    def clear(self, node: str, gpu: int | None) -> None:
        """The fault is repaired: XIDs reset, GPUs back on the bus, cooling restored (the
        temperature falls back at 1 °C/s), links up. Counters keep what they counted."""
        with self._lock:
            t = self.now()
            gpus = self._gpus(node, gpu)
            for state in gpus:
                state.static = None
                state.xid = 0
                state.off_bus = state.missing = False
                state.remap_pending = state.remap_failure = 0
                if state.heat_target is not None:
                    state.heat = Ramp(t, state.heat.at(t), 0.0, 1.0)
                    state.heat_target = None
            if gpu is None:
                for port in self.node(node).ports:
                    if port.up_since is None:
                        port.link_recovery += 1
                        port.set_up(True, t)
            self._version += 1

    def inventory(self, node: str) -> Inventory:
        """The machine and what of it works now: what the host programs report."""
        with self._lock:
            state = self.node(node)
            profile = self.hardware.profile(node, state.uid, state.model, state.gpu_count)
            return Inventory(
                profile=profile,
                absent_gpus=frozenset(g.index for g in state.gpus if not g.healthy_on_bus),
                down_ports=frozenset(p.device for p in state.ports if p.up_since is None),
            )

    def relabel(self, node: str) -> None:
        """The machine's versions changed (a different driver): its series say so."""
        with self._lock:
            state = self.node(node)
            profile = self.hardware.profile(node, state.uid, state.model, state.gpu_count)
            for gpu in state.gpus:
                gpu.labels = gpu_labels(profile, gpu.index, node)
                gpu.static = None
            self._version += 1

    def unhealthy_gpus(self, node: str) -> int:
        """GPUs the device plugin would no longer offer: gone from the node or off the bus."""
        with self._lock:
            return sum(not g.healthy_on_bus for g in self.node(node).gpus)

    def active_faults(self) -> list[dict[str, Any]]:
        with self._lock:
            faults: list[dict[str, Any]] = []
            for name in sorted(self._nodes):
                state = self._nodes[name]
                found = self._store.find("nodes", "", name)
                if found is None or (found.get("metadata") or {}).get("uid", "") != state.uid:
                    # Gone since the last scrape, or a new machine under the name (a GCE MIG
                    # recreates instances under their names): the old one's faults went with it.
                    continue
                for gpu in state.gpus:
                    where = {"node": name, "gpu": gpu.index}
                    if gpu.missing:
                        faults.append({**where, "type": "gpu_missing"})
                    if gpu.xid:
                        faults.append({**where, "type": "xid", "code": gpu.xid})
                    if gpu.heat_target is not None:
                        faults.append({**where, "type": "temperature", "celsius": gpu.heat_target})
                    if gpu.remap_pending and not gpu.xid:  # an XID's remap is listed as the XID
                        faults.append({**where, "type": "row_remap_pending"})
                for port in state.ports:
                    if port.up_since is None:
                        faults.append({"node": name, "type": "ib_link_down", "device": port.device})
            return faults

    # -- exposition --------------------------------------------------------------------------

    def render(self, only_node: str | None = None) -> bytes:
        t_now = self.now()
        step = math.floor(t_now / self._step) * self._step
        with self._lock:
            key = (step, self._version)
            if key != self._cache_key:
                self._cache_key, self._cache = key, {}
            cached = self._cache.get(only_node)
            if cached is not None:
                return cached
            nodes, _ = self._store.list("nodes")
            states = self._sync(nodes, t_now)
            if only_node is not None:
                states = [s for s in states if s.name == only_node]
            gpu_lines: list[list[str]] = [[] for _ in GPU_FAMILIES]
            ib_lines: list[list[str]] = [[] for _ in IB_FAMILIES]
            for state in states:
                for gpu in state.gpus:
                    if not gpu.missing:
                        gpu_samples(gpu, step, gpu_lines)
                for port in state.ports:
                    port_samples(port, step, ib_lines)
            out: list[str] = []
            render_families(GPU_FAMILIES, gpu_lines, out)
            render_families(((n, k, h + _NODE_NOTE) for n, k, h in IB_FAMILIES), ib_lines, out)
            for section in self._sections:
                out.extend(section(states))
            out.append("")
            body = "\n".join(out).encode()
            self._cache[only_node] = body
            return body


def build_metrics_app(telemetry: Telemetry) -> Starlette:
    async def metrics(request: Request) -> Response:
        only = request.query_params.get("node")
        body = await run_in_threadpool(telemetry.render, only)
        return Response(body, media_type=CONTENT_TYPE)

    async def root(_request: Request) -> Response:
        return Response("simulated dcgm-exporter + node_exporter: see /metrics\n")

    return Starlette(routes=[Route("/metrics", metrics), Route("/", root)])
