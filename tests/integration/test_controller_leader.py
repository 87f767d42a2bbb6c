"""Two replicas of the real controller process with leader election on a coordination.k8s.io
Lease: exactly one acts (the other serves its console read-only); when the leader is killed the
other takes the lease once it has expired and finishes the open remediation where it stood."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from remediator.model.states import State
from remediator.store.db import make_engine, make_session_factory
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import Repository
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import ControllerProcess, wait_for, write_process_config

pytestmark = pytest.mark.integration

NODE, POOL, CONDITION = "h100-train-0001", "h100-train", "GpuFallenOffBus"
# Renewals must keep up on a loaded machine (load ~15 on 2 cores): a 2 s renew deadline did not.
LEASE_SECONDS = 6
LEASE = {
    "enabled": True,
    "namespace": "remediator",  # the shipped Role grants leases here only
    "lease_name": "remediator-leader",
    "lease_duration_seconds": LEASE_SECONDS,
    "renew_deadline_seconds": 4,
    "retry_period_seconds": 1,
}
# Between the fault and a kill mid-remediation: past the drain, short of the end.
MID_FLIGHT = {State.DRAINING, State.REPLACING, State.VERIFYING}


@pytest.fixture
def repository(migrated_database_url: str) -> Iterator[Repository]:
    engine = make_engine(migrated_database_url)
    yield Repository(make_session_factory(engine), "default")
    engine.dispose()


def remediation(repository: Repository) -> RemediationRecord | None:
    rows = repository.list(RemediationFilter(node=NODE), limit=1).rows
    return repository.get(rows[0].id) if rows else None


def lease(sim: SimHandle) -> dict[str, str]:
    raw = sim.kubectl("get", "lease", "-n", "remediator", "remediator-leader", "-o", "json")
    spec: dict[str, str] = json.loads(raw)["spec"]
    return spec


def test_one_replica_acts_and_the_other_takes_over(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    repository: Repository,
    tmp_path: Path,
) -> None:
    sim = sim_factory(nodes=8, provision_delay=0.5)
    config = write_process_config(tmp_path, sim, migrated_database_url, leader_election=LEASE)
    first = ControllerProcess(tmp_path, config, "a", identity="replica-a").wait_ready()
    wait_for(
        lambda: first.metric("remediator_is_leader") == 1, timeout=90, what="replica-a to lead"
    )
    second = ControllerProcess(tmp_path, config, "b", identity="replica-b").wait_ready()
    try:
        # Both serve; only one leads, for as long as it renews.
        for _ in range(4):
            assert first.metric("remediator_is_leader") == 1
            assert second.metric("remediator_is_leader") == 0
            time.sleep(0.5)
        assert lease(sim)["holderIdentity"] == "replica-a"
        spare_before = httpx.get(f"{sim.nodepool_url}/v1/pools/{POOL}/capacity").json()

        fault = {
            "type": "condition",
            "node": NODE,
            "condition": "GpuFallenOffBus",
            "status": "True",
        }
        assert httpx.post(f"{sim.inject_url}/v1/faults", json=fault).status_code == 200
        # The draining step can be brief: any open step from the drain on will do, under a
        # bound a loaded machine meets (detection, checkpoint and cordon come first).
        wait_for(
            lambda: (r := remediation(repository)) is not None and r.state in MID_FLIGHT,
            timeout=120,
            what="the drain",
        )
        killed_at = lease(sim)["renewTime"]
        first.kill()

        wait_for(
            lambda: second.metric("remediator_is_leader") == 1, timeout=90, what="replica-b to lead"
        )
        taken = lease(sim)
        assert taken["holderIdentity"] == "replica-b" and int(taken["leaseTransitions"]) >= 1
        waited = datetime.fromisoformat(taken["acquireTime"]) - datetime.fromisoformat(killed_at)
        assert waited.total_seconds() >= LEASE_SECONDS  # it waited for the lease to expire

        wait_for(
            lambda: (r := remediation(repository)) is not None and r.state is State.SUCCEEDED,
            timeout=180,
            what="the remediation to finish",
        )
    finally:
        first.kill()
        second.stop()

    done = remediation(repository)
    assert done is not None
    actors = [e.actor for e in done.events]
    switch = actors.index("controller replica-b")
    assert set(actors[:switch]) == {"controller replica-a"}, actors
    assert set(actors[switch:]) == {"controller replica-b"}, actors
    moves = [e.to_state for e in done.events if e.to_state is not None]
    assert moves == [
        State.DETECTED,
        State.QUARANTINED,
        State.CHECKPOINTING,
        State.DRAINING,
        State.REPLACING,
        State.VERIFYING,
        State.SUCCEEDED,
    ]
    spare_after = httpx.get(f"{sim.nodepool_url}/v1/pools/{POOL}/capacity").json()
    assert spare_after["spare_capacity"] == spare_before["spare_capacity"] - 1
    assert repository.controller_status().leader_identity == "replica-b"
