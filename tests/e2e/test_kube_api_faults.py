"""The real controller process (`remediator run`) against a simulator whose Kubernetes API
misbehaves: it waits out the trouble, says so on the timeline as progress, never evicts twice,
and a leader that cannot renew its lease stops before a standby takes over.

What the API did is read from the simulator's own request log (`GET /v1/kube-requests`): every
eviction, its answer, when it came and from which replica (the User-Agent names the identity)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.model.states import State
from remediator.store.db import make_engine, make_session_factory
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import Repository
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import ControllerProcess, wait_for, write_process_config

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(300)]

POOL = "h100-train"
NODE = f"{POOL}-0001"
CONDITION = {"type": "condition", "node": NODE, "condition": "GpuFallenOffBus", "status": "True"}
WRITES = ["create", "update", "patch", "delete"]
# Shorter than the 30 s: the mechanism (waiting, backing off, resuming) is the same.
OUTAGE_SECONDS = 12
RETRY_AFTER = 5


@pytest.fixture
def repository(migrated_database_url: str) -> Iterator[Repository]:
    engine = make_engine(migrated_database_url)
    yield Repository(make_session_factory(engine), "default")
    engine.dispose()


def remediation(repository: Repository) -> RemediationRecord | None:
    rows = repository.list(RemediationFilter(node=NODE), limit=1).rows
    return repository.get(rows[0].id) if rows else None


def in_state(repository: Repository, *states: State) -> Callable[[], bool]:
    def check() -> bool:
        found = remediation(repository)
        return found is not None and found.state in states

    return check


class Api:
    """The simulator's inject API: Kubernetes faults and the request log."""

    def __init__(self, sim: SimHandle) -> None:
        self.http = httpx.Client(base_url=sim.inject_url, timeout=10.0)

    def fault(self, body: dict[str, Any], path: str = "/v1/kube-faults") -> None:
        response = self.http.post(path, json=body)
        assert response.status_code == 200, response.text

    def requests(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.http.get("/v1/kube-requests").json()["requests"]
        return found

    def evictions(self) -> list[dict[str, Any]]:
        return [r for r in self.requests() if r["resource"] == "pods/eviction"]


def evicted_once_each(api: Api, pods: set[str]) -> None:
    taken = [r["name"] for r in api.evictions() if r["status"] == 201]
    assert sorted(taken) == sorted(pods), taken


def progress_lines(record: RemediationRecord) -> list[str]:
    return [
        str(e.detail.get("reason", ""))
        for e in record.events
        if e.action == "progress" and "Kubernetes API unavailable" in str(e.detail.get("reason"))
    ]


def test_write_outage_and_throttling_mid_drain_pause_and_resume(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    repository: Repository,
    tmp_path: Path,
) -> None:
    sim = sim_factory(nodes=8, provision_delay=0.5)
    api = Api(sim)
    pools = httpx.Client(base_url=sim.nodepool_url, timeout=10.0)
    spare_before = pools.get(f"/v1/pools/{POOL}/capacity").json()["spare_capacity"]
    movable = {
        line.split("/", 1)[1]
        for line in sim.kubectl(
            "get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE}", "-o", "name"
        ).split()
    } - {
        name
        for name in sim.kubectl(
            "get",
            "pods",
            "-A",
            "--field-selector",
            f"spec.nodeName={NODE}",
            "-o",
            "jsonpath={range .items[?(@.metadata.ownerReferences[0].kind=='DaemonSet')]}"
            "{.metadata.name}{'\\n'}{end}",
        ).split()
    }
    assert movable
    # API Priority and Fairness turns the drain's first eviction away with Retry-After.
    api.fault(
        {
            "type": "error",
            "status": 429,
            "resources": ["pods/eviction"],
            "count": 1,
            "retry_after": RETRY_AFTER,
        }
    )
    config = write_process_config(tmp_path, sim, migrated_database_url)
    controller = ControllerProcess(tmp_path, config, "ctl").wait_ready()
    try:
        api.fault(CONDITION, "/v1/faults")
        wait_for(lambda: bool(api.evictions()), timeout=60, what="the first eviction")
        throttled = api.evictions()[0]
        assert throttled["status"] == 429
        # Mid-drain, the apiserver fails every write for a while; and its watches are reset.
        api.fault(
            {"type": "error", "status": 500, "verbs": WRITES, "duration_seconds": OUTAGE_SECONDS}
        )
        api.fault({"type": "watch_gone", "duration_seconds": OUTAGE_SECONDS})
        wait_for(
            lambda: any(r["status"] == 500 for r in api.evictions()),
            timeout=120,
            what="an eviction during the outage",
        )
        # Paused in the grace step or the drain (both evict), not failed or held.
        assert in_state(repository, State.CHECKPOINTING, State.DRAINING)()
        wait_for(
            in_state(repository, State.SUCCEEDED, State.FAILED, State.HELD),
            timeout=120,
            what="the remediation to end",
        )
    finally:
        controller.stop()

    done = remediation(repository)
    assert done is not None and done.state is State.SUCCEEDED, done and done.events
    # Retry-After honoured: that pod was not asked again before the server said it could be.
    again = [
        r for r in api.evictions() if r["name"] == throttled["name"] and r["seq"] > throttled["seq"]
    ]
    assert again and again[0]["at"] - throttled["at"] >= RETRY_AFTER
    evicted_once_each(api, movable)
    spare_after = pools.get(f"/v1/pools/{POOL}/capacity").json()["spare_capacity"]
    assert spare_after == spare_before - 1  # one replacement
    operations = {e.detail["operation_id"] for e in done.events if "operation_id" in e.detail}
    assert operations == {done.replacement_operation_id}
    # The trouble is on the timeline as progress, never as a failure, hold or give-up.
    lines = progress_lines(done)
    assert any("429" in line for line in lines), lines
    assert any("500" in line for line in lines), lines
    bad = [e.action for e in done.events if e.action.endswith(("_failed", "_held"))]
    assert not bad
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


LEASE = {
    "enabled": True,
    "namespace": "remediator",  # the shipped Role grants leases here only
    "lease_name": "remediator-leader",
    "lease_duration_seconds": 4,
    "renew_deadline_seconds": 2,
    "retry_period_seconds": 0.5,
}


def test_a_leader_that_cannot_renew_stops_before_the_standby_acts(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    repository: Repository,
    tmp_path: Path,
) -> None:
    sim = sim_factory(nodes=8, provision_delay=0.5)
    api = Api(sim)
    config = write_process_config(tmp_path, sim, migrated_database_url, leader_election=LEASE)
    first = ControllerProcess(tmp_path, config, "a", identity="replica-a").wait_ready()
    wait_for(lambda: first.metric("remediator_is_leader") == 1, what="replica-a to lead")
    second = ControllerProcess(tmp_path, config, "b", identity="replica-b").wait_ready()

    def evictions_by(who: str) -> list[dict[str, Any]]:
        return [r for r in api.evictions() if f"({who})" in r["user_agent"]]

    try:
        # The apiserver throttles evictions, so the leader keeps acting (asking again and again)
        # while its lease renewals start failing.
        api.fault(
            {"type": "error", "status": 429, "resources": ["pods/eviction"], "retry_after": 1}
        )
        api.fault(CONDITION, "/v1/faults")
        wait_for(lambda: len(evictions_by("replica-a")) >= 2, timeout=60, what="a's evictions")
        before = max(r["seq"] for r in api.requests())
        # Only replica-a's requests to leases fail: it is cut off from its Lease.
        api.fault(
            {"type": "error", "status": 503, "resources": ["leases"], "user_agent": "(replica-a)"}
        )
        wait_for(lambda: first.metric("remediator_is_leader") == 0, what="replica-a to step down")
        wait_for(lambda: second.metric("remediator_is_leader") == 1, what="replica-b to lead")
        wait_for(lambda: bool(evictions_by("replica-b")), timeout=120, what="b's evictions")
        api.fault({"type": "clear"})
        wait_for(in_state(repository, State.SUCCEEDED), timeout=90, what="the remediation")
    finally:
        first.stop()
        second.stop()

    log = api.requests()
    cut = next(
        r for r in log if r["seq"] > before and r["resource"] == "leases" and r.get("injected")
    )

    def writes(who: str) -> list[dict[str, Any]]:
        return [
            r
            for r in log
            if r["verb"] in WRITES and f"({who})" in r["user_agent"] and r["resource"] != "leases"
        ]

    a_writes, b_writes = writes("replica-a"), writes("replica-b")
    assert a_writes and b_writes
    # Never two actors: every write of replica-a came before the first of replica-b, and none
    # later than the renew deadline after its first failed renewal (the fence checks each one).
    assert a_writes[-1]["at"] < b_writes[0]["at"], (a_writes[-1], b_writes[0])
    late = [r for r in a_writes if r["at"] > cut["at"] + LEASE["renew_deadline_seconds"]]
    assert not late, late
    taken = [
        r
        for r in log
        if r["resource"] == "leases" and r["verb"] == "update" and "(replica-b)" in r["user_agent"]
    ]
    assert taken and taken[0]["at"] > cut["at"]
    evicted = [r["name"] for r in api.evictions() if r["status"] == 201]
    assert len(evicted) == len(set(evicted))  # each pod evicted once
    done = remediation(repository)
    assert done is not None
    actors = [e.actor for e in done.events]
    switch = actors.index("controller replica-b")
    assert set(actors[:switch]) == {"controller replica-a"}, actors
    assert set(actors[switch:]) == {"controller replica-b"}, actors
