"""The node-pool service: the pure step planner, the injected request fates, and replacements
carried out on a real SimCluster driven tick by tick on a fake clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from remediator.clock import FakeClock
from remediator.sim.cloud.nodepool import (
    NewNodeStatus,
    NodePoolError,
    NodePoolService,
    Operation,
    OperationError,
    OperationState,
    RequestFaults,
    Step,
    is_ready,
    plan,
    pool_template,
    take_fate,
)
from remediator.sim.kube.controllers.cluster import POOL_LABEL, SimCluster

POOL = "gpu-h100-a"
DELAY = 3.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(clock: FakeClock) -> SimCluster:
    sim = SimCluster(clock=clock)
    for i in range(3):
        sim.add_node(f"{POOL}-{i}", POOL, 8, labels={"team": "training"})
    sim.add_node("gpu-a100-b-0", "gpu-a100-b", 4)
    return sim


@pytest.fixture
def service(cluster: SimCluster, clock: FakeClock) -> NodePoolService:
    svc = NodePoolService(cluster, clock, provision_delay=DELAY, default_spare=2)
    cluster.on_tick(svc.advance)
    return svc


def run_for(cluster: SimCluster, clock: FakeClock, seconds: float, step: float = 0.5) -> None:
    for _ in range(int(seconds / step)):
        clock.advance(step)
        cluster.tick()


def op_at(state: OperationState, clock: FakeClock, started_ago: float | None = None) -> Operation:
    now = clock.now()
    started = now - timedelta(seconds=started_ago) if started_ago is not None else None
    return Operation(
        id="op-1",
        pool=POOL,
        node=f"{POOL}-0",
        reason="test",
        idempotency_key="k",
        created_at=now,
        updated_at=now,
        state=state,
        new_node=f"{POOL}-new" if started is not None else None,
        started_at=started,
    )


# -- plan ---------------------------------------------------------------------------------------


def test_plan_starts_a_pending_operation(clock: FakeClock) -> None:
    op = op_at(OperationState.PENDING, clock)
    assert plan(op, clock.now(), DELAY, NewNodeStatus.ABSENT).step is Step.START


def test_plan_succeeds_only_when_the_new_node_is_ready_after_the_delay(clock: FakeClock) -> None:
    early = op_at(OperationState.PROVISIONING, clock, started_ago=1.0)
    assert plan(early, clock.now(), DELAY, NewNodeStatus.READY).step is Step.WAIT
    joining = op_at(OperationState.PROVISIONING, clock, started_ago=5.0)
    assert plan(joining, clock.now(), DELAY, NewNodeStatus.JOINING).step is Step.WAIT
    assert plan(joining, clock.now(), DELAY, NewNodeStatus.READY).step is Step.SUCCEED


def test_plan_fails_a_lost_node_a_timeout_and_a_doomed_operation(clock: FakeClock) -> None:
    lost = plan(
        op_at(OperationState.PROVISIONING, clock, 1.0), clock.now(), DELAY, NewNodeStatus.ABSENT
    )
    assert lost.step is Step.FAIL and lost.error and lost.error.code == "node_lost"
    slow = plan(
        op_at(OperationState.PROVISIONING, clock, 61.0), clock.now(), DELAY, NewNodeStatus.JOINING
    )
    assert slow.step is Step.FAIL and slow.error and slow.error.code == "provisioning_timeout"
    doomed = op_at(OperationState.PROVISIONING, clock, 1.0)
    doomed.doomed = OperationError("provisioning_failed", "no instance")
    assert plan(doomed, clock.now(), DELAY, NewNodeStatus.ABSENT).step is Step.WAIT
    doomed.started_at = clock.now() - timedelta(seconds=DELAY)
    failed = plan(doomed, clock.now(), DELAY, NewNodeStatus.ABSENT)
    assert failed == type(failed)(Step.FAIL, doomed.doomed)


def test_plan_leaves_finished_operations_alone(clock: FakeClock) -> None:
    for state in (OperationState.SUCCEEDED, OperationState.FAILED):
        assert (
            plan(op_at(state, clock, 100.0), clock.now(), DELAY, NewNodeStatus.READY).step
            is Step.WAIT
        )


# -- request fates ------------------------------------------------------------------------------


def test_fates_are_consumed_in_order_errors_before_throttling() -> None:
    faults = RequestFaults(
        error_count=1,
        error_status=503,
        throttle_count=2,
        retry_after=7,
        delay_count=1,
        delay_seconds=0.5,
    )
    first = take_fate(faults, "POST")
    assert (first.error_status, first.retry_after, first.delay) == (503, None, 0.5)
    second = take_fate(faults, "GET")
    assert (second.error_status, second.retry_after, second.delay) == (None, 7, 0.0)
    assert take_fate(faults, "POST").retry_after == 7
    clean = take_fate(faults, "POST")
    assert (clean.error_status, clean.retry_after, clean.delay) == (None, None, 0.0)


def test_a_fate_scoped_to_a_method_spares_the_others() -> None:
    faults = RequestFaults(error_count=1, error_method="POST", delay_count=1, delay_seconds=2.0)
    read = take_fate(faults, "GET")
    assert (read.error_status, read.delay) == (None, 2.0)
    assert faults.error_count == 1
    write = take_fate(faults, "POST")
    assert (write.error_status, write.delay) == (500, 0.0)


# -- the service on a real cluster ------------------------------------------------------------


def test_pools_come_from_the_cluster_with_their_template(service: NodePoolService) -> None:
    pools = {p["name"]: p for p in service.list_pools()["pools"]}
    assert set(pools) == {POOL, "gpu-a100-b"}
    assert pools[POOL]["node_count"] == 3 and pools[POOL]["gpus_per_node"] == 8
    assert pools[POOL]["spare_capacity"] == 2
    assert pools[POOL]["labels"]["team"] == "training"
    assert "kubernetes.io/hostname" not in pools[POOL]["labels"]
    assert POOL_LABEL not in pools[POOL]["labels"]
    detail = service.get_pool(POOL)
    assert detail["nodes"] == [f"{POOL}-0", f"{POOL}-1", f"{POOL}-2"]
    with pytest.raises(NodePoolError) as err:
        service.get_pool("nope")
    assert (err.value.status, err.value.code) == (404, "pool_not_found")


def test_a_replacement_swaps_the_node_for_a_ready_one(
    service: NodePoolService, cluster: SimCluster, clock: FakeClock
) -> None:
    op, created = service.request_replacement(POOL, f"{POOL}-1", "XID 79", "key-1")
    assert created and op["state"] == "pending" and op["new_node"] is None
    assert service.capacity(POOL)["spare_capacity"] == 1  # reserved at once
    run_for(cluster, clock, 0.5)
    op = service.get_operation(op["id"])
    assert op["state"] == "provisioning"
    new = op["new_node"]
    assert new.startswith(f"{POOL}-") and new != f"{POOL}-1"
    assert cluster.store.find("nodes", "", f"{POOL}-1") is None
    joining = cluster.store.get("nodes", "", new)
    assert not is_ready(joining)
    states = {n["name"]: n["state"] for n in service.pool_nodes(POOL)["nodes"]}
    assert states[new] == "provisioning" and states[f"{POOL}-0"] == "running"
    run_for(cluster, clock, DELAY + 1.0)
    op = service.get_operation(op["id"])
    assert op["state"] == "succeeded" and op["error"] is None
    node = cluster.store.get("nodes", "", new)
    assert is_ready(node)
    labels = node["metadata"]["labels"]
    assert labels[POOL_LABEL] == POOL and labels["team"] == "training"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert service.capacity(POOL)["spare_capacity"] == 1
    assert op["updated_at"] > op["created_at"]


def test_the_same_key_returns_the_same_operation_whatever_its_state(
    service: NodePoolService, cluster: SimCluster, clock: FakeClock
) -> None:
    first, _ = service.request_replacement(POOL, f"{POOL}-0", "r", "same")
    again, created = service.request_replacement(POOL, f"{POOL}-0", "other reason", "same")
    assert not created and again["id"] == first["id"]
    run_for(cluster, clock, DELAY + 1.5)
    done, created = service.request_replacement(POOL, f"{POOL}-0", "r", "same")
    assert not created and done["id"] == first["id"] and done["state"] == "succeeded"
    assert service.capacity(POOL)["spare_capacity"] == 1  # one replacement, not three
    with pytest.raises(NodePoolError) as err:
        service.request_replacement(POOL, f"{POOL}-2", "r", "same")
    assert (err.value.status, err.value.code) == (409, "idempotency_key_reused")


def test_refusals_name_the_problem(service: NodePoolService) -> None:
    cases = [
        (("nope", f"{POOL}-0"), 404, "pool_not_found", '"nope"'),
        ((POOL, "gpu-a100-b-0"), 404, "node_not_found", f'not in node pool "{POOL}"'),
    ]
    for (pool, node), status, code, text in cases:
        with pytest.raises(NodePoolError) as err:
            service.request_replacement(pool, node, "r", f"k-{code}")
        assert (err.value.status, err.value.code) == (status, code)
        assert text in err.value.message
    service.request_replacement(POOL, f"{POOL}-0", "r", "a")
    with pytest.raises(NodePoolError) as err:
        service.request_replacement(POOL, f"{POOL}-0", "r", "b")
    assert err.value.code == "replacement_in_progress" and "op-" in err.value.message


def test_no_spare_capacity_is_a_409_naming_the_pool(service: NodePoolService) -> None:
    service.set_spare(POOL, 0)
    with pytest.raises(NodePoolError) as err:
        service.request_replacement(POOL, f"{POOL}-0", "r", "k")
    assert (err.value.status, err.value.code) == (409, "capacity_exhausted")
    assert f'node pool "{POOL}" has no spare capacity' in err.value.message
    service.set_spare(POOL, 1)
    _, created = service.request_replacement(POOL, f"{POOL}-0", "r", "k")
    assert created  # the refused request did not bind its key
    assert service.capacity(POOL)["spare_capacity"] == 0


def test_a_failed_operation_keeps_the_old_node_and_returns_the_capacity(
    service: NodePoolService, cluster: SimCluster, clock: FakeClock
) -> None:
    service.fail_next(1, "provisioning_failed", "no instance of that type in the zone")
    op, _ = service.request_replacement(POOL, f"{POOL}-2", "r", "k")
    assert service.capacity(POOL)["spare_capacity"] == 1
    run_for(cluster, clock, DELAY + 1.0)
    op = service.get_operation(op["id"])
    assert op["state"] == "failed" and op["new_node"] is None
    assert op["error"] == {
        "code": "provisioning_failed",
        "message": "no instance of that type in the zone",
    }
    assert cluster.store.find("nodes", "", f"{POOL}-2") is not None
    assert service.capacity(POOL)["spare_capacity"] == 2
    second, _ = service.request_replacement(POOL, f"{POOL}-2", "r", "k2")
    run_for(cluster, clock, DELAY + 1.5)
    assert service.get_operation(second["id"])["state"] == "succeeded"


def test_a_new_node_that_vanishes_fails_the_operation(
    service: NodePoolService, cluster: SimCluster, clock: FakeClock
) -> None:
    op, _ = service.request_replacement(POOL, f"{POOL}-0", "r", "k")
    run_for(cluster, clock, 0.5)
    cluster.remove_node(service.get_operation(op["id"])["new_node"])
    run_for(cluster, clock, 0.5)
    failed = service.get_operation(op["id"])
    assert failed["state"] == "failed" and failed["error"]["code"] == "node_lost"


def test_the_template_ignores_labels_put_on_nodes_later(
    service: NodePoolService, cluster: SimCluster, clock: FakeClock
) -> None:
    def quarantine(node: dict[str, object]) -> None:
        node["metadata"]["labels"]["remediator.io/quarantined"] = "true"  # type: ignore[index]

    for i in range(3):
        cluster.store.mutate("nodes", "", f"{POOL}-{i}", quarantine)
    op, _ = service.request_replacement(POOL, f"{POOL}-0", "r", "k")
    run_for(cluster, clock, DELAY + 1.5)
    new = cluster.store.get("nodes", "", service.get_operation(op["id"])["new_node"])
    assert "remediator.io/quarantined" not in new["metadata"]["labels"]


def test_pool_template_is_the_labels_every_node_shares(cluster: SimCluster) -> None:
    nodes = [cluster.store.get("nodes", "", f"{POOL}-{i}") for i in range(3)]
    template = pool_template(nodes)
    assert template.gpus == 8
    assert template.labels["team"] == "training"
    assert "topology.kubernetes.io/zone" not in template.labels
    assert pool_template([]).labels == {} and pool_template([]).gpus == 0
