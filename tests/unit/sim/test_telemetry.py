"""The simulated DCGM / InfiniBand exposition: parseable, named and labelled as the real exporters,
counters that only grow, bounded drift, and faults that show where a scraper would look."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from remediator.clock import FakeClock
from remediator.sim.cloud.nodepool import NodePoolService
from remediator.sim.faults.inject import FAULT, BadFault, FaultInjector
from remediator.sim.kube.controllers.cluster import SimCluster
from remediator.sim.node import nccl
from remediator.sim.telemetry.exporters import (
    CLOCKS_HW_THERMAL,
    CLOCKS_SW_THERMAL,
    GPU_FAMILIES,
    IB_FAMILIES,
    Ramp,
    Telemetry,
    UnknownNode,
    clock_event_reasons,
    gpu_uuid,
    xid_message,
)

POOL = "gpu-h100-a"
GPU_LABELS = {
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
}
IB_LABELS = {"device", "port", "node"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(clock: FakeClock) -> SimCluster:
    sim = SimCluster(clock=clock)
    for i in range(3):
        sim.add_node(f"{POOL}-{i}", POOL, 8)
    sim.add_node("gpu-a100-b-0", "gpu-a100-b", 4)
    return sim


@pytest.fixture
def telemetry(cluster: SimCluster, clock: FakeClock) -> Telemetry:
    return Telemetry(cluster.store, clock, seed=7)


def wire_samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample line as it is on the wire: (name, sorted labels) -> value."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        labels_text, _, value = rest.rpartition("} ")
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', labels_text)))
        out[(name, labels)] = float(value)
    return out


def series(body: bytes, name: str, **match: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        labels: value
        for (n, labels), value in wire_samples(body).items()
        if n == name and all((k, v) in labels for k, v in match.items())
    }


def one(body: bytes, name: str, **match: str) -> float:
    found = series(body, name, **match)
    assert len(found) == 1, f"{name} {match}: {found}"
    return next(iter(found.values()))


def test_an_a100_node_is_the_a100_profile_with_its_nvlink_bandwidth(telemetry: Telemetry) -> None:
    """Its label (NVIDIA-A100-SXM4-80GB) once became "NVIDIA A100 SXM4 80GB", a model the
    hardware table does not know: a PCIe card's 20 GB/s, under the shipped 180 GB/s floor."""
    profile = telemetry.inventory("gpu-a100-b-0").profile
    assert profile.model == "NVIDIA A100-SXM4-80GB"
    argv = ["all_reduce_perf", "-b", "1G", "-e", "8G", "-f", "2", "-g", "4"]
    result = nccl.run(argv, profile, [0, 1, 2, 3], "gpu-a100-b-0")
    assert result.exit_code == 0, result.output
    assert "NVIDIA A100-SXM4-80GB" in result.output
    bus = re.search(r"# Avg bus bandwidth +: ([\d.]+)", result.output)
    assert bus is not None and float(bus[1]) > 180, result.output


def test_exposition_parses_with_help_and_type_for_every_family(telemetry: Telemetry) -> None:
    body = telemetry.render()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    expected = {
        (name.removesuffix("_total") if kind == "counter" and name.endswith("_total") else name)
        for name, kind, _ in GPU_FAMILIES + IB_FAMILIES
    }
    assert set(families) == expected
    kinds = {name: kind for name, kind, _ in GPU_FAMILIES + IB_FAMILIES}
    for name, kind in kinds.items():
        family = families[name.removesuffix("_total") if name.endswith("_total") else name]
        assert family.type == kind, name
        assert family.documentation, name
    text = body.decode()
    assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in text
    assert "# TYPE DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL counter" in text
    assert "# TYPE node_infiniband_link_downed_total counter" in text
    assert "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered." in text


def test_series_per_gpu_and_port_with_the_exporters_labels(telemetry: Telemetry) -> None:
    body = telemetry.render()
    temps = series(body, "DCGM_FI_DEV_GPU_TEMP")
    assert len(temps) == 3 * 8 + 4
    for labels in temps:
        assert {k for k, _ in labels} == GPU_LABELS
    node0 = {
        dict(labels)["gpu"]: dict(labels)
        for labels in series(body, "DCGM_FI_DEV_GPU_TEMP", Hostname=f"{POOL}-0")
    }
    assert sorted(node0, key=int) == [str(i) for i in range(8)]
    gpu3 = node0["3"]
    assert gpu3["UUID"] == gpu_uuid(f"{POOL}-0", 3)
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", gpu3["UUID"]
    )
    assert re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", gpu3["pci_bus_id"])
    assert gpu3["device"] == "nvidia3"
    assert gpu3["modelName"] == "NVIDIA H100 80GB HBM3"
    assert len({labels["UUID"] for labels in node0.values()}) == 8
    a100 = series(body, "DCGM_FI_DEV_GPU_TEMP", Hostname="gpu-a100-b-0")
    assert {dict(labels)["modelName"] for labels in a100} == {"NVIDIA A100-SXM4-80GB"}

    xid = series(body, "DCGM_FI_DEV_XID_ERRORS", Hostname=f"{POOL}-1", gpu="0")
    ((labels, value),) = xid.items()
    assert dict(labels)["err_code"] == "0" and dict(labels)["err_msg"] == "No Error"
    assert value == 0

    ports = series(body, "node_infiniband_state_id")
    assert len(ports) == 3 * 8 + 4
    for labels in ports:
        assert {k for k, _ in labels} == IB_LABELS
    assert {
        dict(labels)["device"]
        for labels in series(body, "node_infiniband_state_id", node=f"{POOL}-2")
    } == {f"mlx5_{i}" for i in range(8)}
    assert set(series(body, "node_infiniband_state_id").values()) == {4.0}
    assert set(series(body, "node_infiniband_physical_state_id").values()) == {5.0}


def test_counters_only_grow_and_values_follow_the_clock_not_the_scrape(
    telemetry: Telemetry, clock: FakeClock
) -> None:
    counters = {name for name, kind, _ in GPU_FAMILIES + IB_FAMILIES if kind == "counter"}
    first = telemetry.render()
    assert telemetry.render() == first  # same clock, same answer
    previous = wire_samples(first)
    for step in range(40):
        clock.advance(7.5)
        if step == 5:
            telemetry.ib_link(f"{POOL}-0", "mlx5_1", up=False)
            telemetry.nvlink_errors(f"{POOL}-1", 2, 50)
        if step == 20:
            telemetry.clear(f"{POOL}-0", None)
        current = wire_samples(telemetry.render())
        for key, value in current.items():
            if key[0] in counters:
                assert value >= previous[key], key
        previous = current
    rx = series(telemetry.render(), "node_infiniband_port_data_received_bytes_total")
    assert all(v > 0 for v in rx.values())


def test_temperatures_drift_within_bounds_around_their_baseline(
    telemetry: Telemetry, clock: FakeClock
) -> None:
    seen: dict[tuple[tuple[str, str], ...], list[float]] = {}
    for _ in range(120):
        clock.advance(30)
        for labels, value in series(telemetry.render(), "DCGM_FI_DEV_GPU_TEMP").items():
            seen.setdefault(labels, []).append(value)
    for labels, values in seen.items():
        assert min(values) >= 40 and max(values) <= 66, (labels, min(values), max(values))
        assert max(values) - min(values) <= 6, labels
        assert len(set(values)) > 1, f"{labels} never moved"
    utils = series(telemetry.render(), "DCGM_FI_DEV_GPU_UTIL")
    assert all(0 <= v <= 100 for v in utils.values())
    tensor = series(telemetry.render(), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    assert all(0 <= v <= 1 for v in tensor.values())


def test_same_seed_same_fleet(cluster: SimCluster, clock: FakeClock) -> None:
    a = Telemetry(cluster.store, clock, seed=1)
    b = Telemetry(cluster.store, clock, seed=1)
    c = Telemetry(cluster.store, clock, seed=2)
    clock.advance(100)
    assert a.render() == b.render()
    assert a.render() != c.render()


def test_nodes_start_and_stop_exporting_with_the_store(
    telemetry: Telemetry, cluster: SimCluster, clock: FakeClock
) -> None:
    assert series(telemetry.render(), "DCGM_FI_DEV_GPU_TEMP", Hostname=f"{POOL}-9") == {}
    cluster.add_node(f"{POOL}-9", POOL, 8)
    body = telemetry.render()
    assert len(series(body, "DCGM_FI_DEV_GPU_TEMP", Hostname=f"{POOL}-9")) == 8
    assert len(series(body, "node_infiniband_state_id", node=f"{POOL}-9")) == 8
    telemetry.xid(f"{POOL}-0", 0, 79)
    cluster.remove_node(f"{POOL}-0")
    assert telemetry.active_faults() == []  # its faults went with it
    clock.advance(1)
    body = telemetry.render()
    assert series(body, "DCGM_FI_DEV_XID_ERRORS", Hostname=f"{POOL}-0") == {}
    assert series(body, "node_infiniband_state_id", node=f"{POOL}-0") == {}


def test_one_node_per_scrape_with_the_node_parameter(telemetry: Telemetry) -> None:
    body = telemetry.render(f"{POOL}-1")
    assert {dict(labels)["Hostname"] for labels in series(body, "DCGM_FI_DEV_GPU_TEMP")} == {
        f"{POOL}-1"
    }
    assert len(series(body, "node_infiniband_state_id")) == 8


def test_xid_79_leaves_only_the_xid_series_of_that_gpu(telemetry: Telemetry) -> None:
    node = f"{POOL}-1"
    telemetry.xid(node, 3, 79)
    body = telemetry.render()
    ((labels, value),) = series(body, "DCGM_FI_DEV_XID_ERRORS", Hostname=node, gpu="3").items()
    assert value == 79
    assert dict(labels)["err_code"] == "79"
    assert dict(labels)["err_msg"] == "GPU has fallen off the bus"
    assert series(body, "DCGM_FI_DEV_GPU_TEMP", Hostname=node, gpu="3") == {}
    assert series(body, "DCGM_FI_DEV_POWER_USAGE", Hostname=node, gpu="3") == {}
    assert len(series(body, "DCGM_FI_DEV_GPU_TEMP", Hostname=node)) == 7
    assert telemetry.unhealthy_gpus(node) == 1
    assert {"node": node, "gpu": 3, "type": "xid", "code": 79} in telemetry.active_faults()


def test_xid_48_counts_a_double_bit_error_and_a_pending_remap(telemetry: Telemetry) -> None:
    node = f"{POOL}-2"
    telemetry.xid(node, 0, 48)
    body = telemetry.render()
    assert one(body, "DCGM_FI_DEV_XID_ERRORS", Hostname=node, gpu="0") == 48
    assert one(body, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Hostname=node, gpu="0") == 1
    assert one(body, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", Hostname=node, gpu="0") == 1
    assert one(body, "DCGM_FI_DEV_ROW_REMAP_PENDING", Hostname=node, gpu="0") == 1
    assert one(body, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Hostname=node, gpu="0") == 1
    assert one(body, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Hostname=node, gpu="1") == 0


def test_a_missing_gpu_loses_every_series(telemetry: Telemetry) -> None:
    node = f"{POOL}-0"
    telemetry.gpu_missing(node, 5)
    body = telemetry.render()
    for name, _, _ in GPU_FAMILIES:
        assert series(body, name, Hostname=node, gpu="5") == {}, name
    assert len(series(body, "DCGM_FI_DEV_XID_ERRORS", Hostname=node)) == 7
    telemetry.clear(node, 5)
    assert len(series(telemetry.render(), "DCGM_FI_DEV_XID_ERRORS", Hostname=node)) == 8


def test_overheating_ramps_holds_throttles_and_cools_after_clear(
    telemetry: Telemetry, clock: FakeClock
) -> None:
    node = f"{POOL}-0"

    def temp() -> float:
        return one(telemetry.render(), "DCGM_FI_DEV_GPU_TEMP", Hostname=node, gpu="2")

    start = temp()
    assert start < 70
    assert telemetry.heat(node, 2, 95.0, rate=1.0) == [2]
    clock.advance(10)
    assert start + 5 <= temp() <= start + 15  # on its way, at about 1 °C/s
    clock.advance(120)
    held = temp()
    assert 92 <= held <= 98
    reasons = one(telemetry.render(), "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", Hostname=node, gpu="2")
    assert int(reasons) & CLOCKS_SW_THERMAL and int(reasons) & CLOCKS_HW_THERMAL
    assert one(telemetry.render(), "DCGM_FI_DEV_MEMORY_TEMP", Hostname=node, gpu="2") > held
    assert temp() < 100
    others = series(telemetry.render(), "DCGM_FI_DEV_GPU_TEMP", Hostname=node, gpu="1")
    assert max(others.values()) < 70
    telemetry.clear(node, None)
    clock.advance(5)
    assert 85 <= temp() <= 93  # cooling, not a jump
    clock.advance(120)
    assert temp() < 70


def test_node_wide_heat_reaches_every_gpu(telemetry: Telemetry, clock: FakeClock) -> None:
    node = "gpu-a100-b-0"
    assert telemetry.heat(node, None, 85.0, rate=5.0) == [0, 1, 2, 3]
    clock.advance(60)
    temps = series(telemetry.render(), "DCGM_FI_DEV_GPU_TEMP", Hostname=node)
    assert len(temps) == 4 and all(v >= 82 for v in temps.values())


def test_nvlink_burst_makes_the_counters_jump(telemetry: Telemetry) -> None:
    node = f"{POOL}-1"
    telemetry.nvlink_errors(node, 6, 100)
    body = telemetry.render()
    assert one(body, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", Hostname=node, gpu="6") == 100
    assert one(body, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", Hostname=node, gpu="6") == 50
    assert one(body, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", Hostname=node, gpu="6") == 100
    assert one(body, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", Hostname=node, gpu="6") == 1
    assert one(body, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", Hostname=node, gpu="5") == 0


def test_ib_link_down_stops_traffic_until_it_comes_back(
    telemetry: Telemetry, clock: FakeClock
) -> None:
    node, dev = f"{POOL}-2", "mlx5_3"
    rx = "node_infiniband_port_data_received_bytes_total"
    clock.advance(10)
    telemetry.ib_link(node, dev, up=False)
    clock.advance(1)
    body = telemetry.render()
    assert one(body, "node_infiniband_state_id", node=node, device=dev) == 1
    assert one(body, "node_infiniband_physical_state_id", node=node, device=dev) == 3
    assert one(body, "node_infiniband_link_downed_total", node=node, device=dev) == 1
    assert one(body, "node_infiniband_state_id", node=node, device="mlx5_2") == 4
    frozen = one(body, rx, node=node, device=dev)
    clock.advance(30)
    assert one(telemetry.render(), rx, node=node, device=dev) == frozen
    assert {"node": node, "type": "ib_link_down", "device": dev} in telemetry.active_faults()
    telemetry.clear(node, None)
    clock.advance(30)
    body = telemetry.render()
    assert one(body, "node_infiniband_state_id", node=node, device=dev) == 4
    assert one(body, rx, node=node, device=dev) > frozen
    assert one(body, "node_infiniband_link_downed_total", node=node, device=dev) == 1
    assert one(body, "node_infiniband_link_error_recovery_total", node=node, device=dev) == 1


def test_symbol_errors_add_up(telemetry: Telemetry) -> None:
    node = f"{POOL}-0"
    before = one(
        telemetry.render(), "node_infiniband_symbol_error_total", node=node, device="mlx5_0"
    )
    telemetry.ib_symbol_errors(node, "mlx5_0", 500)
    after = one(
        telemetry.render(), "node_infiniband_symbol_error_total", node=node, device="mlx5_0"
    )
    assert after == before + 500


def test_bad_targets_are_refused_with_a_reason(telemetry: Telemetry) -> None:
    with pytest.raises(UnknownNode):
        telemetry.xid("no-such-node", 0, 79)
    with pytest.raises(ValueError, match=r"has 4 GPUs \(0-3\); there is no GPU 4"):
        telemetry.xid("gpu-a100-b-0", 4, 79)
    with pytest.raises(ValueError, match="no InfiniBand device mlx5_9"):
        telemetry.ib_link(f"{POOL}-0", "mlx5_9", up=False)


def test_ramp_moves_linearly_then_holds() -> None:
    ramp = Ramp(since=10.0, start=0.0, target=30.0, rate=2.0)
    assert ramp.at(0.0) == 0.0
    assert ramp.at(15.0) == 10.0
    assert ramp.at(25.0) == 30.0
    assert ramp.at(1000.0) == 30.0
    down = Ramp(since=0.0, start=30.0, target=0.0, rate=1.0)
    assert down.at(10.0) == 20.0
    assert down.at(100.0) == 0.0


def test_clock_event_reasons_and_xid_messages() -> None:
    assert clock_event_reasons(60.0, power_capped=False) == 0
    assert clock_event_reasons(60.0, power_capped=True) == 0x4
    assert clock_event_reasons(86.0, power_capped=False) == 0x20
    assert clock_event_reasons(93.0, power_capped=False) == 0x60
    assert xid_message(79) == "GPU has fallen off the bus"
    assert xid_message(48) == "Double Bit ECC Error"
    assert xid_message(999) == "Unknown Error"


# -- the injector: faults reach the Node object too ---------------------------------------------


@pytest.fixture
def injector(cluster: SimCluster, telemetry: Telemetry, clock: FakeClock) -> FaultInjector:
    return FaultInjector(cluster, telemetry, NodePoolService(cluster, clock))


def allocatable_gpus(cluster: SimCluster, node: str) -> str:
    return str(cluster.store.get("nodes", "", node)["status"]["allocatable"]["nvidia.com/gpu"])


def test_lost_gpus_leave_allocatable_until_cleared(
    injector: FaultInjector, cluster: SimCluster
) -> None:
    node = f"{POOL}-0"
    text = injector.apply(
        FAULT.validate_python({"type": "xid", "node": node, "gpu": 1, "code": 79})
    )
    assert "allocatable nvidia.com/gpu is now 7" in text
    injector.apply(FAULT.validate_python({"type": "gpu_missing", "node": node, "gpu": 2}))
    assert allocatable_gpus(cluster, node) == "6"
    assert cluster.store.get("nodes", "", node)["status"]["capacity"]["nvidia.com/gpu"] == "8"
    injector.apply(FAULT.validate_python({"type": "clear", "node": node, "gpu": 2}))
    assert allocatable_gpus(cluster, node) == "7"
    injector.apply(FAULT.validate_python({"type": "clear", "node": node}))
    assert allocatable_gpus(cluster, node) == "8"
    assert injector.active() == []


def test_injected_conditions_are_set_listed_and_reset(
    injector: FaultInjector, cluster: SimCluster
) -> None:
    node = f"{POOL}-2"

    def status(kind: str) -> str:
        conditions = cluster.store.get("nodes", "", node)["status"]["conditions"]
        return str(next(c for c in conditions if c["type"] == kind)["status"])

    for kind, value in (("GpuXidError", "True"), ("Ready", "False")):
        injector.apply(
            FAULT.validate_python(
                {"type": "condition", "node": node, "condition": kind, "status": value}
            )
        )
    assert (status("GpuXidError"), status("Ready")) == ("True", "False")
    assert {"node": node, "type": "condition", "condition": "Ready", "status": "False"} in (
        injector.active()
    )
    text = injector.apply(FAULT.validate_python({"type": "clear", "node": node}))
    assert "conditions reset: GpuXidError, Ready" in text
    assert (status("GpuXidError"), status("Ready")) == ("False", "True")


def test_bad_faults_are_refused_with_status_and_reason(injector: FaultInjector) -> None:
    with pytest.raises(BadFault) as err:
        injector.apply(
            FAULT.validate_python({"type": "xid", "node": "ghost", "gpu": 0, "code": 79})
        )
    assert (err.value.status, err.value.code) == (404, "node_not_found")
    with pytest.raises(BadFault) as err:
        injector.apply(
            FAULT.validate_python({"type": "gpu_missing", "node": "gpu-a100-b-0", "gpu": 4})
        )
    assert (err.value.status, err.value.code) == (400, "invalid_fault")
    for bad in (
        {"type": "xid", "node": f"{POOL}-0", "code": 79},  # no GPU
        {"type": "xid", "node": f"{POOL}-0", "gpu": 0, "code": 0},
        {"type": "temperature", "node": f"{POOL}-0", "celsius": 500},
        {"type": "condition", "node": f"{POOL}-0", "condition": "Ready", "status": "yes"},
        {"type": "meltdown", "node": f"{POOL}-0"},
    ):
        with pytest.raises(ValidationError):
            FAULT.validate_python(bad)


GPU = st.integers(0, 3)
# (what, GPU or port index, amount); clear with index -1 repairs the whole node.
FAULT_STEPS = st.one_of(
    st.tuples(st.just("advance"), st.just(0), st.floats(min_value=0.1, max_value=120.0)),
    st.tuples(st.just("xid"), GPU, st.sampled_from([13.0, 48.0, 63.0, 64.0, 74.0, 79.0, 92.0])),
    st.tuples(st.just("heat"), GPU, st.floats(min_value=30.0, max_value=110.0)),
    st.tuples(st.just("nvlink"), GPU, st.integers(1, 10_000).map(float)),
    st.tuples(st.just("ib_down"), GPU, st.just(0.0)),
    st.tuples(st.just("symbols"), GPU, st.integers(1, 10_000).map(float)),
    st.tuples(st.just("missing"), GPU, st.just(0.0)),
    st.tuples(st.just("clear"), st.integers(-1, 3), st.just(0.0)),
)


def apply_step(
    telemetry: Telemetry, clock: FakeClock, node: str, step: tuple[str, int, float]
) -> None:
    what, index, amount = step
    if what == "advance":
        clock.advance(amount)
    elif what == "xid":
        telemetry.xid(node, index, int(amount))
    elif what == "heat":
        telemetry.heat(node, index, amount, rate=2.0)
    elif what == "nvlink":
        telemetry.nvlink_errors(node, index, int(amount))
    elif what == "ib_down":
        telemetry.ib_link(node, f"mlx5_{index}", up=False)
    elif what == "symbols":
        telemetry.ib_symbol_errors(node, f"mlx5_{index}", int(amount))
    elif what == "missing":
        telemetry.gpu_missing(node, index)
    else:
        telemetry.clear(node, None if index < 0 else index)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(FAULT_STEPS, min_size=1, max_size=25))
def test_any_fault_sequence_keeps_counters_monotonic_and_gauges_sane(
    steps: list[tuple[str, int, float]],
) -> None:
    clock = FakeClock()
    sim = SimCluster(clock=clock)
    node = "gpu-a100-b-0"
    sim.add_node(node, "gpu-a100-b", 4)
    telemetry = Telemetry(sim.store, clock)
    counters = {name for name, kind, _ in GPU_FAMILIES + IB_FAMILIES if kind == "counter"}
    seen = wire_samples(telemetry.render())
    for step in steps:
        apply_step(telemetry, clock, node, step)
        current = wire_samples(telemetry.render())
        for key, value in current.items():
            name = key[0]
            if name in counters and key in seen:
                assert value >= seen[key], (step, key)
            if name == "DCGM_FI_DEV_GPU_TEMP":  # between the coldest and hottest target ± drift
                assert 27 <= value <= 113, (step, key, value)
            if name == "DCGM_FI_DEV_GPU_UTIL":
                assert 0 <= value <= 100
        seen.update(current)


def test_a_pending_row_remap_is_injected_per_gpu_and_a_reset_clears_it(
    cluster: SimCluster, telemetry: Telemetry, injector: FaultInjector
) -> None:
    from remediator.sim.faults.repair import FaultRepairs

    repairs = FaultRepairs(cluster, telemetry)
    repairs.attach(injector)
    node = f"{POOL}-1"
    text = injector.apply(
        FAULT.validate_python({"type": "row_remap_pending", "node": node, "gpu": 4})
    )
    assert text == f"row remap pending a GPU reset on node {node} GPU 4"
    body = telemetry.render()
    assert one(body, "DCGM_FI_DEV_ROW_REMAP_PENDING", Hostname=node, gpu="4") == 1
    assert one(body, "DCGM_FI_DEV_ROW_REMAP_PENDING", Hostname=node, gpu="3") == 0
    assert one(body, "DCGM_FI_DEV_XID_ERRORS", Hostname=node, gpu="4") == 0  # no XID: it worked
    assert {"node": node, "gpu": 4, "type": "row_remap_pending"} in injector.active()
    assert repairs.reset_gpu(node, 4) is None
    body = telemetry.render()
    assert one(body, "DCGM_FI_DEV_ROW_REMAP_PENDING", Hostname=node, gpu="4") == 0
    assert one(body, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Hostname=node, gpu="4") == 1
    assert injector.active() == []
