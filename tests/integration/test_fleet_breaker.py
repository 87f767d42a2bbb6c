"""The fleet-wide breaker on one real PostgreSQL shared by two clusters' controllers (their
intake services, as each controller runs them): faults spread over both clusters trip it where
neither cluster's own breaker trips, both then queue every decision, a restart keeps it, the
fleet console shows it and only a fleet-wide operator resets it, audited in both clusters."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.remediation.intake import Intake, IntakeResult, Inventory
from remediator.settings import ScopedToken, Settings, WebSettings
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.audit import AuditLog, AuditQuery
from remediator.store.clusters import ClusterRegistry
from remediator.store.fleet_breaker import FleetBreakerStore
from remediator.store.records import RemediationFilter
from remediator.store.repository import Repository
from remediator.web.fleet import Fleet, create_fleet_app
from tests.fixtures.postgres import PostgresServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
FLEET_OPERATOR = "fleet-operator-token-0123"
EAST_OPERATOR = "east-operator-token-0123"
FLEET_READER = "fleet-readonly-token-0123"
CLUSTERS = ("east", "west")
# 100 nodes each, 200 in the fleet: 5% is 10 newly faulted nodes in 10 minutes. Each cluster's
# own storm breaker (shipped: the stricter of 20 and 10%, at least 3) trips at 10 of its 100.
INVENTORY = {
    c: Inventory(pools={f"{c}-gpu-{i:03d}": "train" for i in range(100)}) for c in CLUSTERS
}


@pytest.fixture
def policies(tmp_path: Path) -> PolicySet:
    target = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", target, ignore=shutil.ignore_patterns("tests"))
    with (target / "settings.yaml").open("a") as settings:
        settings.write("fleet_breaker:\n  enabled: true\n  max_new_faults: {percent: 5}\n")
        settings.write("  window: 10m\n")
    found = load_policy_dir(target)
    assert found.settings.fleet_breaker.enabled
    return found


@dataclass
class Controller:
    """One cluster's controller as far as the fleet breaker goes: its repository and intake."""

    repository: Repository
    intake: Intake


@dataclass
class World:
    url: str
    engine: Engine
    clock: FakeClock

    def controller(self, cluster: str) -> Controller:
        """A controller starting (or restarting): fresh objects over the shared database."""
        factory = db.make_session_factory(self.engine)
        repository = Repository(factory, cluster, self.clock)
        fleet = FleetBreakerStore(factory, self.clock)
        actor = f"controller {cluster}-0"
        return Controller(repository, Intake(repository, actor=actor, fleet=fleet))


@pytest.fixture
def world(postgres_server: PostgresServer) -> Iterator[World]:
    url = postgres_server.url(postgres_server.migrated_database())
    engine = db.make_engine(url)
    clock = FakeClock(T0)
    registry = ClusterRegistry(db.make_session_factory(engine), clock)
    for cluster in CLUSTERS:
        registry.claim(cluster, f"uid-{cluster}", by=f"controller {cluster}-0")
    yield World(url, engine, clock)
    engine.dispose()


def xid79(cluster: str, *numbers: int) -> list[Signal]:
    return [
        Signal(
            node=f"{cluster}-gpu-{n:03d}",
            kind=SignalKind.XID,
            source="push",
            observed_at=T0,
            gpu=0,
            code=79,
        )
        for n in numbers
    ]


def fault(
    controller: Controller, cluster: str, world: World, policies: PolicySet, *n: int
) -> IntakeResult:
    return controller.intake.process(
        xid79(cluster, *n), INVENTORY[cluster], policies, world.clock.now()
    )


def test_faults_across_two_clusters_trip_it_and_both_queue_until_a_fleet_operator_resets_it(
    world: World, policies: PolicySet
) -> None:
    east, west = world.controller("east"), world.controller("west")
    store = FleetBreakerStore(db.make_session_factory(world.engine), world.clock)
    for controller, cluster in ((east, "east"), (west, "west")):  # their first heartbeats
        controller.intake.report_fleet_size(INVENTORY[cluster], policies, world.clock.now())

    first = fault(east, "east", world, policies, 0, 1, 2, 3, 4)
    world.clock.advance(60)
    second = fault(west, "west", world, policies, 0, 1, 2, 3)
    assert not store.status().tripped  # 9 of 200: below 10
    assert first.created and second.created
    assert all(r.queue_cause != "breaker" for r in [*first.queued, *second.queued])

    world.clock.advance(60)
    tenth = fault(west, "west", world, policies, 4)  # the 10th: the fleet breaker trips
    status = store.status()
    assert status.tripped and status.tripped_by == "west"
    assert status.reason == (
        "10 of 200 fleet nodes newly faulted within 10m (limit 10) in 2 clusters (east, west); "
        "a human must reset it"
    )
    (held,) = tenth.queued
    assert held.queue_cause == "breaker"
    assert held.hold_reason == f"fleet breaker tripped: {status.reason}"
    for controller in (east, west):  # neither cluster's own breaker tripped
        assert not controller.repository.controller_status().breaker_tripped

    # East obeys it too, and so does a restarted controller (its state is in the database).
    east = world.controller("east")
    world.clock.advance(30)
    later = fault(east, "east", world, policies, 50)
    assert [(r.node, r.queue_cause) for r in later.queued] == [("east-gpu-050", "breaker")]
    assert later.created == ()

    fleet = Fleet(_settings(world.url), world.engine, world.clock)
    with TestClient(create_fleet_app(fleet)) as client:
        shown = client.get("/api/v1/clusters", headers=_auth(FLEET_OPERATOR)).json()
        assert shown["fleet_breaker"]["tripped"] is True
        assert shown["fleet_breaker"]["tripped_by"] == "west"
        page = client.get("/fleet", headers=_auth(FLEET_OPERATOR))
        assert "Fleet breaker tripped (first seen by cluster west)" in page.text
        assert 'action="/fleet/breaker/reset"' in page.text
        east_page = client.get("/?cluster=east", headers=_auth(FLEET_OPERATOR))
        assert "Fleet breaker tripped" in east_page.text

        refused = client.post(
            "/api/v1/fleet/breaker/reset",
            headers=_auth(EAST_OPERATOR),
            json={"reason": "east is fine"},
        )
        assert refused.status_code == 403, refused.text
        assert store.status().tripped
        done = client.post(
            "/api/v1/fleet/breaker/reset",
            headers=_auth(FLEET_OPERATOR) | {"X-Remediator-Actor": "ana"},
            json={"reason": "driver 580.1 rolled back"},
        )
        assert done.status_code == 200, done.text
        assert done.json()["tripped"] is False
        assert done.json()["reset_reason"] == "driver 580.1 rolled back"
        assert (
            "Fleet breaker tripped" not in client.get("/fleet", headers=_auth(FLEET_OPERATOR)).text
        )

    factory = db.make_session_factory(world.engine)
    for cluster in CLUSTERS:
        audit = AuditLog(factory, cluster, world.clock).list(AuditQuery(("reset-fleet-breaker",)))
        assert [(a.outcome, a.reason) for a in audit] == [
            ("done", "driver 580.1 rolled back"),
            ("refused", "east is fine"),
        ]
        assert audit[0].actor.startswith("ana (operator token ")
        assert audit[0].detail == f"was tripped: {status.reason}"

    # Released: each cluster's queued decisions are offered to its own budgets again (east has
    # 5 in flight, its max_concurrent), and the faults that tripped it are not counted again.
    world.clock.advance(5)
    east.intake.admit_queued(INVENTORY["east"], policies, world.clock.now())
    assert not store.status().tripped
    queued = east.repository.list(RemediationFilter(states=frozenset({State.QUEUED}))).rows
    assert [(r.node, r.queue_cause, r.hold_reason) for r in queued] == [
        ("east-gpu-050", "budget", "max concurrent remediations (5)")
    ]


def test_the_fault_that_reaches_the_limit_trips_it_in_its_own_cycle(
    world: World, policies: PolicySet
) -> None:
    """A cycle's faults count in that cycle's verdict, however long the cycle took to record
    them: here the shared window is written a second after the cycle's `now`."""
    later = FakeClock(T0)
    later.advance(1)  # the store's clock: the writes happen after the cycle began
    factory = db.make_session_factory(world.engine)
    store = FleetBreakerStore(factory, later)
    east = Intake(Repository(factory, "east", world.clock), actor="controller east-0", fleet=store)
    west = world.controller("west")
    west.intake.report_fleet_size(INVENTORY["west"], policies, world.clock.now())
    east.report_fleet_size(INVENTORY["east"], policies, world.clock.now())
    east.process(xid79("east", *range(9)), INVENTORY["east"], policies, world.clock.now())
    assert not store.status().tripped  # 9 of 200
    tenth = east.process(xid79("east", 9), INVENTORY["east"], policies, world.clock.now())
    assert store.status().tripped, "the 10th fault of 200 trips it in its own cycle"
    assert [r.queue_cause for r in tenth.queued] == ["breaker"]


def test_two_controllers_tripping_at_once_record_one_trip(world: World) -> None:
    stores = [
        FleetBreakerStore(db.make_session_factory(world.engine), world.clock) for _ in CLUSTERS
    ]
    barrier = threading.Barrier(len(stores))
    won: list[bool] = []

    def trip(store: FleetBreakerStore, cluster: str) -> None:
        barrier.wait(timeout=30)
        won.append(store.trip(reason=f"seen by {cluster}", by_cluster=cluster))

    threads = [
        threading.Thread(target=trip, args=pair) for pair in zip(stores, CLUSTERS, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(won) == [False, True]
    status = stores[0].status()
    assert status.tripped and status.reason == f"seen by {status.tripped_by}"


def test_a_read_only_reset_is_refused_and_audited_in_every_cluster(world: World) -> None:
    """The reset's 403 for a read-only token is a refused command like any other: a row in
    each cluster's audit log, with who asked and why."""
    store = FleetBreakerStore(db.make_session_factory(world.engine), world.clock)
    store.trip(reason="a storm", by_cluster="east")
    fleet = Fleet(_settings(world.url), world.engine, world.clock)
    with TestClient(create_fleet_app(fleet)) as client:
        refused = client.post(
            "/api/v1/fleet/breaker/reset",
            headers=_auth(FLEET_READER) | {"X-Remediator-Actor": "rita"},
            json={"reason": "looks calm"},
        )
        assert refused.status_code == 403, refused.text
    assert store.status().tripped
    factory = db.make_session_factory(world.engine)
    for cluster in CLUSTERS:
        (row,) = AuditLog(factory, cluster, world.clock).list(AuditQuery(("reset-fleet-breaker",)))
        assert (row.outcome, row.reason) == ("refused", "looks calm")
        assert row.actor.startswith("rita (readonly token ")
        assert "read-only" in (row.detail or "")


def _settings(url: str) -> Settings:
    return Settings(
        database_url=url,
        web=WebSettings(
            operator_tokens=[
                SecretStr(FLEET_OPERATOR),
                ScopedToken(token=SecretStr(EAST_OPERATOR), clusters=["east"]),
            ],
            readonly_tokens=[SecretStr(FLEET_READER)],
        ),
    )


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
