"""A pool's baseline is what the majority of its in-service nodes run now, read from GPU
feature discovery's labels over each node's last passed validation; a value only one machine
shows, or that has no majority, is reported and never fails the node under test."""

from __future__ import annotations

from typing import Any

from remediator.actions import burnin
from remediator.kube.objects import Node, NodeCondition, Taint
from remediator.model.gpus import DRIVER_LABEL

FLEET = "550.127.08"
OLD = "535.183.01"
VALIDATED = {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "driver": OLD, "cuda": "12.2"}


def node(
    name: str,
    driver: str | None = FLEET,
    *,
    ready: bool = True,
    cordoned: bool = False,
    taints: tuple[Taint, ...] = (),
) -> Node:
    return Node(
        name=name,
        uid=f"uid-{name}",
        resource_version="1",
        labels={DRIVER_LABEL: driver} if driver else {},
        unschedulable=cordoned,
        taints=taints,
        conditions=(NodeCondition("Ready", "True" if ready else "False"),),
    )


def summary(driver: str) -> dict[str, Any]:
    return {**VALIDATED, "driver": driver, "cuda": "12.2" if driver == OLD else "12.4"}


def test_only_in_service_nodes_speak_for_the_pool() -> None:
    pool = [
        node("under-test"),
        node("serving"),
        node("not-ready", ready=False),
        node("cordoned", cordoned=True),
        node("quarantined", taints=(Taint("remediator.io/quarantine", "x"),)),
        node("unvalidated", taints=(Taint("example.com/unvalidated", "true"),)),
        node("remediated"),
        node("silent", driver=None),
    ]
    readings = burnin.pool_readings(
        "under-test", pool, {}, busy={"remediated"}, startup_taint_key="example.com/unvalidated"
    )
    assert readings == {"serving": {"driver": FLEET}}


def test_the_labels_follow_a_driver_change_over_the_last_validation() -> None:
    """`first` was validated on 535 and has run 550 since: its labels say so."""
    readings = burnin.pool_readings(
        "n9",
        [node("first"), node("plain", driver=None)],
        {"first": VALIDATED, "plain": VALIDATED},
        (),
    )
    assert readings["first"]["driver"] == FLEET and readings["first"]["gpu_model"]
    assert readings["plain"]["driver"] == OLD


def test_the_in_service_majority_binds_and_the_odd_machine_is_reported() -> None:
    baseline = burnin.baseline_of(
        {"first": summary(OLD), "b": summary(FLEET), "c": summary(FLEET)}, {}
    )
    assert baseline is not None and baseline.values["driver"] == FLEET
    assert baseline.source == "majority of 3 in-service node(s)"
    assert baseline.off_baseline == {"first": {"driver": OLD, "cuda": "12.2"}}
    healthy = burnin.inventory_verdict(_inventory(FLEET), baseline)
    assert (
        healthy.passed
        and "off the pool's baseline: first (driver 535.183.01, cuda 12.2)" in healthy.reason
    )
    wrong = burnin.inventory_verdict(_inventory(OLD), baseline)
    assert not wrong.passed and f"driver is {OLD}, the pool's baseline {FLEET}" in wrong.reason


def test_a_single_machine_sets_no_baseline_it_is_reported() -> None:
    baseline = burnin.baseline_of({"first": summary(OLD)}, {})
    assert baseline is not None and baseline.values == {}
    assert baseline.unenforced["driver"] == {OLD: ["first"]}
    verdict = burnin.inventory_verdict(_inventory(FLEET), baseline)
    assert verdict.passed, verdict.reason
    assert "driver not enforced (a single machine's: 535.183.01 on first)" in verdict.reason
    agrees = burnin.inventory_verdict(_inventory(OLD), baseline)
    assert agrees.passed and "not enforced" not in agrees.reason


def test_two_against_two_is_no_majority_and_binds_nothing() -> None:
    readings = {n: summary(FLEET if n < "c" else OLD) for n in ("a", "b", "c", "d")}
    baseline = burnin.baseline_of(readings, {})
    assert baseline is not None and "driver" not in baseline.values
    assert baseline.disagreeing == ("driver", "cuda")
    verdict = burnin.inventory_verdict(_inventory(OLD), baseline)
    assert verdict.passed and "driver not enforced (no majority: " in verdict.reason


def test_a_pin_binds_even_a_pool_of_one() -> None:
    baseline = burnin.baseline_of({"first": summary(OLD)}, {"driver": FLEET})
    assert baseline is not None and baseline.values["driver"] == FLEET
    assert not burnin.inventory_verdict(_inventory(OLD), baseline).passed


def test_an_empty_pool_without_pins_has_no_baseline() -> None:
    assert burnin.baseline_of({}, {}) is None


def _inventory(driver: str) -> burnin.Inventory:
    gpus = "\n".join(
        f"{i}, NVIDIA H100 80GB HBM3, GPU-{i:08d}-0000-0000-0000-000000000000, 165{i:010d}, "
        f"00000000:{0x18 + i:02X}:00.0, {driver}, 96.00.99.00.01, 81559 MiB"
        for i in range(8)
    )
    cuda = "12.2" if driver == OLD else "12.4"
    banner = f"| NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: {cuda}     |\n"
    ibstat = "".join(
        f"CA 'mlx5_{i}'\n\tPort 1:\n\t\tState: Active\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n"
        for i in range(8)
    )
    read = burnin.read_inventory({"gpus": gpus, "smi": banner, "ib": ibstat})
    assert isinstance(read, burnin.Inventory), read
    return read
