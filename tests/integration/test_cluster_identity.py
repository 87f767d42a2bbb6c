"""Cluster identity in a shared database, on SQLite and PostgreSQL: a name is owned by the UID
of one cluster's kube-system namespace; an existing single-cluster database upgrades in place
from 0006 with its rows and their cluster kept."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, text

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.store import db
from remediator.store.clusters import ClusterRegistry, IdentityConflict
from remediator.store.records import RemediationFilter
from remediator.store.repository import Repository

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
UID_A = "6f1c2a4e-0000-4000-8000-00000000000a"
UID_B = "6f1c2a4e-0000-4000-8000-00000000000b"


@pytest.fixture
def engine(migrated_database_url: str) -> Iterator[Engine]:
    engine = db.make_engine(migrated_database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def registry(engine: Engine) -> ClusterRegistry:
    return ClusterRegistry(db.make_session_factory(engine), FakeClock(T0))


def test_the_first_start_records_the_identity_and_later_starts_confirm_it(
    registry: ClusterRegistry,
) -> None:
    first = registry.claim("prod", UID_A, by="controller a-0")
    again = registry.claim("prod", UID_A, by="controller a-1")
    assert (first.name, first.kube_system_uid, first.registered_by) == (
        "prod",
        UID_A,
        "controller a-0",
    )
    assert again == first  # the first registration stands
    assert registry.names() == ("prod",)


def test_a_second_cluster_with_a_taken_name_is_refused(registry: ClusterRegistry) -> None:
    registry.claim("prod", UID_A, by="controller a-0")
    with pytest.raises(IdentityConflict, match=r"'prod' belongs to another cluster.*" + UID_A):
        registry.claim("prod", UID_B, by="controller b-0")
    assert registry.get("prod") is not None and registry.get("prod").kube_system_uid == UID_A  # type: ignore[union-attr]


def test_one_cluster_cannot_take_a_second_name(registry: ClusterRegistry) -> None:
    registry.claim("prod", UID_A, by="controller a-0")
    with pytest.raises(IdentityConflict, match="already registered as 'prod'"):
        registry.claim("prod-2", UID_A, by="controller a-0")
    assert registry.names() == ("prod",)


@pytest.mark.parametrize("name", ["Prod", "prod_east", "-prod", "x" * 129, ""])
def test_a_bad_name_is_refused_before_anything_is_written(
    registry: ClusterRegistry, name: str
) -> None:
    with pytest.raises(Exception, match="cluster name"):
        registry.claim(name, UID_A, by="controller")
    assert registry.names() == ()


def test_racing_first_starts_agree_on_one_owner(registry: ClusterRegistry) -> None:
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def start(uid: str) -> None:
        barrier.wait(timeout=30)
        try:
            registry.claim("prod", uid, by=uid)
            outcomes.append("owner")
        except IdentityConflict:
            outcomes.append("refused")

    threads = [threading.Thread(target=start, args=(uid,)) for uid in (UID_A, UID_B)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(outcomes) == ["owner", "refused"]


def test_a_single_cluster_database_upgrades_from_0006_with_its_rows(database_url: str) -> None:
    engine = db.make_engine(database_url)
    try:
        db.upgrade(engine, "0006")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO remediations (id, cluster, node, pool, policy, policy_priority, "
                    "state, dry_run, approval_required, reason, signal_kind, xid_code, signals, "
                    "ladder, step_index, idempotency_key, attempts, version, created_at, "
                    "updated_at) VALUES (41, 'lab', 'gpu-7', 'train', 'xid-fatal', 0, "
                    "'awaiting_approval', false, true, 'XID 79', 'xid', 79, '[]', "
                    "'[{\"action\": \"cordon\"}]', 0, 'key-41', 0, 1, :at, :at)"
                ),
                {"at": T0 if engine.dialect.name == "postgresql" else "2026-01-10 12:00:00"},
            )
            conn.execute(
                text(
                    "INSERT INTO controller_state (cluster, paused, breaker_tripped, updated_at) "
                    "VALUES ('lab', false, false, :at)"
                ),
                {"at": T0 if engine.dialect.name == "postgresql" else "2026-01-10 12:00:00"},
            )
        db.upgrade(engine, "head")
        db.check(engine)
        factory = db.make_session_factory(engine)
        repo = Repository(factory, "lab", FakeClock(T0))
        kept = repo.get(41)
        assert kept is not None
        assert (kept.cluster, kept.node, kept.state) == ("lab", "gpu-7", State.AWAITING_APPROVAL)
        assert repo.count(RemediationFilter()) == 1
        registry = ClusterRegistry(factory, FakeClock(T0))
        # The cluster shows in the fleet before its controller restarts, and then owns its name.
        assert registry.names() == ("lab",)
        registry.claim("lab", UID_A, by="controller lab-0")
        with pytest.raises(IdentityConflict):
            registry.claim("lab", UID_B, by="controller other-0")
        assert repo.get(41) == kept
    finally:
        engine.dispose()
