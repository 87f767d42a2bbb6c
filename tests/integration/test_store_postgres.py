"""The store against real databases: every test runs on SQLite and on a throwaway PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from remediator.clock import FakeClock
from remediator.errors import ConflictError, IllegalTransition, NotFoundError
from remediator.model.states import OPEN, State
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.cursor import InvalidCursor
from remediator.store.models import Base, exists_on
from remediator.store.records import (
    DailyCount,
    NewRemediation,
    RemediationFilter,
    RemediationRecord,
)
from remediator.store.repository import OpenRemediationExists, Repository

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
TABLES = {
    "remediations",
    "remediation_events",
    "signals",
    "policy_sets",
    "controller_state",
    "source_health",
    "audit_log",
    "web_sessions",
}
R = TypeVar("R")
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"


def _signal(node: str, kind: SignalKind = SignalKind.XID, code: int | None = 79) -> Signal:
    return Signal(node=node, kind=kind, source="dcgm", observed_at=T0, gpu=3, code=code)


def _new(node: str, **changes: Any) -> NewRemediation:
    kind = changes.pop("kind", SignalKind.XID)
    code = changes.pop("code", 79 if kind is SignalKind.XID else None)
    base: dict[str, Any] = {
        "node": node,
        "policy": "xid-fatal",
        "reason": f"XID {code} on GPU 3",
        "signals": [_signal(node, kind, code)],
        "ladder": [{"action": "cordon"}, {"action": "drain", "grace_seconds": 120}],
        "pool": "train-a",
        "policy_commit": "abc123",
        "policy_hash": "h1",
    }
    base.update(changes)
    return NewRemediation(**base)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def engine_factory() -> Iterator[Callable[[str], Engine]]:
    engines = []

    def make(url: str) -> Engine:
        engine = db.make_engine(url)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.dispose()


@pytest.fixture
def engine(migrated_database_url: str, engine_factory: Callable[[str], Engine]) -> Engine:
    return engine_factory(migrated_database_url)


@pytest.fixture
def repo(engine: Engine, clock: FakeClock) -> Repository:
    return Repository(db.make_session_factory(engine), "cluster-a", clock)


def _race(workers: int, work: Callable[[int], R]) -> list[R | BaseException]:
    """Run `work` in threads released together; collect each result or exception."""
    barrier = threading.Barrier(workers)
    results: list[R | BaseException] = [RuntimeError("did not run")] * workers

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results[i] = work(i)
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


# -- migrations ----------------------------------------------------------------------------------


def test_migrations_match_the_models_and_downgrade(
    database_url: str, engine_factory: Callable[[str], Engine]
) -> None:
    engine = engine_factory(database_url)
    db.upgrade(engine)
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) >= TABLES
        opts = {
            "compare_type": True,
            "include_object": lambda item, *_: exists_on(conn.dialect.name, item),
        }
        context = MigrationContext.configure(conn, opts=opts)
        assert compare_metadata(context, Base.metadata) == []
        indexes = {ix["name"] for ix in inspect(conn).get_indexes("remediations")}
        assert {"uq_remediations_open_node", "ix_remediations_open"} <= indexes
        assert ("ix_remediations_node_trgm" in indexes) == (conn.dialect.name == "postgresql")
    db.check(engine)
    db.upgrade(engine)  # a second upgrade is a no-op
    db.downgrade(engine, "base")
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) == {"alembic_version"}
        if conn.dialect.name == "postgresql":
            functions = conn.execute(
                text(
                    "SELECT count(*) FROM pg_proc WHERE proname = 'remediation_events_append_only'"
                )
            ).scalar()
            assert functions == 0
    with pytest.raises(db.StoreUnavailable):
        db.check(engine)


def test_cli_upgrade_runs_from_any_directory(database_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMEDIATOR_")}
    upgrade = subprocess.run(
        [sys.executable, "-m", "remediator", "db", "upgrade", "--database-url", database_url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert upgrade.returncode == 0, upgrade.stderr
    assert f"at revision {db.head_revision()}" in upgrade.stdout
    config = tmp_path / "settings.yaml"
    config.write_text(f"database_url: {database_url}\n")
    check = subprocess.run(
        [sys.executable, "-m", "remediator", "db", "check", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr


def test_cli_upgrade_reports_an_unreachable_database(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "remediator", "db", "upgrade", "--database-url", UNREACHABLE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "remediator db upgrade:" in result.stderr


# -- creating and moving remediations ------------------------------------------------------------


def test_create_persists_the_decision_and_its_first_event(repo: Repository) -> None:
    created = repo.create(_new("gpu-1", approval_required=True), actor="controller-0")
    assert created.state is State.DETECTED
    assert created.version == 1
    assert created.signal_kind == "xid" and created.xid_code == 79
    assert created.created_at == T0 and created.created_at.tzinfo is UTC
    assert len(created.idempotency_key) == 32
    loaded = repo.get(created.id)
    assert loaded is not None
    assert loaded.signals == (_signal("gpu-1"),)
    assert loaded.ladder[1] == {"action": "drain", "grace_seconds": 120}
    assert loaded.approval_required is True
    assert [(e.from_state, e.to_state, e.action, e.actor) for e in loaded.events] == [
        (None, State.DETECTED, "detected", "controller-0")
    ]
    assert repo.get(created.id + 1000) is None


def test_transition_moves_state_and_records_the_event(repo: Repository, clock: FakeClock) -> None:
    created = repo.create(_new("gpu-1"), actor="c")
    clock.advance(5)
    moved = repo.transition(
        created.id,
        State.DETECTED,
        State.QUARANTINED,
        action="cordon",
        actor="c",
        detail={"taint": "remediator.io/quarantined"},
        step_index=1,
    )
    assert (moved.state, moved.version, moved.step_index) == (State.QUARANTINED, 2, 1)
    assert moved.updated_at == T0 + timedelta(seconds=5)
    clock.advance(5)
    failed = repo.transition(
        moved.id, State.QUARANTINED, State.FAILED, action="fail", actor="c", error="boom"
    )
    assert failed.finished_at == T0 + timedelta(seconds=10)
    assert failed.error == "boom"
    retried = repo.transition(failed.id, State.FAILED, State.DRAINING, action="retry", actor="c")
    assert retried.finished_at is None
    loaded = repo.get(created.id)
    assert loaded is not None
    assert [e.to_state for e in loaded.events] == [
        State.DETECTED,
        State.QUARANTINED,
        State.FAILED,
        State.DRAINING,
    ]
    assert loaded.events[1].detail == {"taint": "remediator.io/quarantined"}


def test_has_open_agrees_with_list_open(repo: Repository) -> None:
    """The idle advance tick's one read: no open remediation, then one, then none (failed is
    not open)."""
    assert repo.has_open() is False and repo.list_open() == ()
    created = repo.create(_new("gpu-1"), actor="c")
    assert repo.has_open() is True and len(repo.list_open()) == 1
    repo.transition(created.id, State.DETECTED, State.FAILED, action="fail", actor="c")
    assert repo.has_open() is False and repo.list_open() == ()


def test_list_open_reads_again_only_what_moved_and_misses_no_change(
    repo: Repository, clock: FakeClock
) -> None:
    """list_open keeps its last rows by version: each list is still exactly the table's open
    rows, oldest first, with every field as written, whichever replica (Repository) wrote it."""
    other = Repository(repo.session_factory, repo.cluster, clock)
    first = repo.create(_new("gpu-1"), actor="c")
    clock.advance(1)
    second = repo.create(_new("gpu-2"), actor="c")
    assert [r.id for r in repo.list_open()] == [first.id, second.id]
    kept = repo.list_open()[0]
    assert repo.list_open()[0] is kept  # unmoved: not built again

    other.update_fields(first.id, first.version, attempts=3)  # a write this one did not make
    moved = repo.list_open()[0]
    assert moved.attempts == 3 and moved.version == first.version + 1
    other.transition(second.id, State.DETECTED, State.FAILED, action="fail", actor="c")
    clock.advance(1)
    third = other.create(_new("gpu-3"), actor="c")
    assert [r.id for r in repo.list_open()] == [first.id, third.id]
    assert repo.list_open() == other.list_open()
    loaded = repo.get(first.id)
    assert loaded is not None and repo.list_open()[0] == replace(loaded, events=())


def test_illegal_transitions_are_refused_and_leave_no_trace(repo: Repository) -> None:
    created = repo.create(_new("gpu-1"), actor="c")
    with pytest.raises(IllegalTransition):
        repo.transition(created.id, State.DETECTED, State.VERIFYING, action="x", actor="c")
    with pytest.raises(ValueError, match="cannot update"):
        repo.transition(
            created.id, State.DETECTED, State.QUARANTINED, action="x", actor="c", state="held"
        )
    loaded = repo.get(created.id)
    assert loaded is not None
    assert (loaded.state, loaded.version, len(loaded.events)) == (State.DETECTED, 1, 1)


def test_stale_expectations_lose(repo: Repository) -> None:
    created = repo.create(_new("gpu-1"), actor="c")
    with pytest.raises(ConflictError):
        repo.transition(created.id, State.QUARANTINED, State.DRAINING, action="x", actor="c")
    bumped = repo.update_fields(created.id, created.version, attempts=1)
    assert (bumped.attempts, bumped.version) == (1, 2)
    with pytest.raises(ConflictError):
        repo.update_fields(created.id, created.version, attempts=2)
    with pytest.raises(ConflictError):
        repo.transition(
            created.id,
            State.DETECTED,
            State.QUARANTINED,
            action="x",
            actor="c",
            expected_version=created.version,
        )
    with pytest.raises(NotFoundError):
        repo.update_fields(created.id + 1000, 1, attempts=1)
    other_cluster = Repository(repo.session_factory, "cluster-b")
    assert other_cluster.get(created.id) is None
    with pytest.raises(NotFoundError):
        other_cluster.transition(
            created.id, State.DETECTED, State.QUARANTINED, action="x", actor="c"
        )


def test_racing_transitions_have_exactly_one_winner(repo: Repository) -> None:
    targets = [State.QUARANTINED, State.AWAITING_APPROVAL, State.FAILED, State.SUCCEEDED]
    for round_ in range(5):
        created = repo.create(_new(f"gpu-{round_}"), actor="c")

        def move(i: int, rid: int = created.id) -> RemediationRecord:
            return repo.transition(
                rid, State.DETECTED, targets[i], action=f"racer-{i}", actor=f"r{i}"
            )

        results = _race(len(targets), move)
        winners = [r for r in results if isinstance(r, RemediationRecord)]
        losers = [r for r in results if isinstance(r, ConflictError)]
        assert (len(winners), len(losers)) == (1, len(targets) - 1), results
        loaded = repo.get(created.id)
        assert loaded is not None
        assert loaded.state is winners[0].state and loaded.version == 2
        assert len(loaded.events) == 2


def test_one_open_remediation_per_node_even_under_a_race(repo: Repository) -> None:
    results = _race(6, lambda i: repo.create(_new("gpu-1", reason=f"racer {i}"), actor="c"))
    winners = [r for r in results if isinstance(r, RemediationRecord)]
    losers = [r for r in results if isinstance(r, OpenRemediationExists)]
    assert (len(winners), len(losers)) == (1, 5), results
    assert {loser.existing_id for loser in losers} == {winners[0].id}
    assert [r.id for r in repo.list_open()] == [winners[0].id]
    repo.transition(winners[0].id, State.DETECTED, State.SUCCEEDED, action="ok", actor="c")
    again = repo.create(_new("gpu-1"), actor="c")
    assert again.id != winners[0].id
    # Another cluster's node of the same name is a different node.
    Repository(repo.session_factory, "cluster-b").create(_new("gpu-1"), actor="c")


def test_the_database_itself_refuses_a_second_open_row(
    migrated_database_url: str, engine_factory: Callable[[str], Engine]
) -> None:
    """The guarantee does not rest on the repository's pre-check."""
    engine = engine_factory(migrated_database_url)
    insert = text(
        "INSERT INTO remediations (cluster, node, policy, policy_priority, state, dry_run, "
        "approval_required, reason, signal_kind, signals, ladder, step_index, idempotency_key, "
        "attempts, version, created_at, updated_at) VALUES ('c', 'n', 'p', 0, :state, false, "
        "false, 'r', 'xid', '[]', '[]', 0, :key, 0, 1, :at, :at)"
    )
    at = "2026-01-01 00:00:00"
    with engine.begin() as conn:
        conn.execute(insert, {"state": "succeeded", "key": "k1", "at": at})
        conn.execute(insert, {"state": "draining", "key": "k2", "at": at})
    with pytest.raises(DBAPIError, match=r"(?i)unique"), engine.begin() as conn:
        conn.execute(insert, {"state": "held", "key": "k3", "at": at})


# -- the timeline is append-only -----------------------------------------------------------------


def test_events_are_append_only(repo: Repository, engine: Engine) -> None:
    created = repo.create(_new("gpu-1"), actor="c")
    note = repo.append_event(
        created.id, action="sigterm", actor="c", detail={"pod": "ns/x", "grace_seconds": 120}
    )
    assert (note.from_state, note.to_state) == (None, None)
    with pytest.raises(NotFoundError):
        repo.append_event(created.id + 1000, action="x", actor="c")
    for statement in (
        "UPDATE remediation_events SET actor = 'someone else'",
        "DELETE FROM remediation_events",
    ):
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text(statement))
    if engine.dialect.name == "postgresql":
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text("TRUNCATE remediation_events CASCADE"))
    loaded = repo.get(created.id)
    assert loaded is not None
    assert [e.action for e in loaded.events] == ["detected", "sigterm"]
    assert loaded.events[1].detail == {"pod": "ns/x", "grace_seconds": 120}


# -- listing for the console ---------------------------------------------------------------------


def _seed(repo: Repository, clock: FakeClock) -> list[RemediationRecord]:
    """30 remediations, several sharing a created_at (ties decided by id), in mixed states."""
    made = []
    kinds = [SignalKind.XID, SignalKind.THERMAL, SignalKind.NVLINK]
    for i in range(30):
        if i % 3:
            clock.advance(60)
        kind = kinds[i % 3]
        created = repo.create(
            _new(
                f"gpu-node-{i:02d}",
                kind=kind,
                code=79 if i % 2 else 48,
                pool="train-a" if i % 2 else "infer-b",
                policy="thermal" if kind is SignalKind.THERMAL else "xid-fatal",
                dry_run=i % 5 == 0,
            ),
            actor="c",
        )
        if i % 4 == 0:
            created = repo.transition(
                created.id, State.DETECTED, State.SUCCEEDED, action="ok", actor="c"
            )
        made.append(created)
    return made


def _newest_first(rows: list[RemediationRecord]) -> list[int]:
    return [r.id for r in sorted(rows, key=lambda r: (r.created_at, r.id), reverse=True)]


def _all_pages(repo: Repository, filters: RemediationFilter, limit: int) -> list[int]:
    seen: list[int] = []
    cursor = None
    for _ in range(100):
        page = repo.list(filters, cursor, limit)
        assert len(page.rows) <= limit
        seen.extend(r.id for r in page.rows)
        if page.next_cursor is None:
            return seen
        assert len(page.rows) == limit
        cursor = page.next_cursor
    raise AssertionError("pagination did not end")


@pytest.mark.parametrize("limit", [1, 4, 7, 30, 31])
def test_keyset_pages_are_complete_and_stable(
    repo: Repository, clock: FakeClock, limit: int
) -> None:
    made = _seed(repo, clock)
    assert _all_pages(repo, RemediationFilter(), limit) == _newest_first(made)
    open_first = [r.id for r in made if r.state in OPEN]
    closed = [r.id for r in made if r.state not in OPEN]
    expected = _newest_first([r for r in made if r.id in open_first]) + _newest_first(
        [r for r in made if r.id in closed]
    )
    assert _all_pages(repo, RemediationFilter(in_flight_first=True), limit) == expected


def test_in_flight_first_pages_are_stable_while_rows_move_between_phases(
    repo: Repository, clock: FakeClock
) -> None:
    """A row that closes after its page was shown is not shown again; one that reopens after
    the open rows were paged past is not skipped: the pages follow the list as it stood when
    the first page was read."""
    _seed(repo, clock)
    # One closed row that can reopen (failed → retry); closed rows come after every open one.
    reopenable = repo.create(_new("gpu-node-failed"), actor="c")
    clock.advance(60)
    failed = repo.transition(reopenable.id, State.DETECTED, State.FAILED, action="x", actor="c")
    clock.advance(60)
    filters = RemediationFilter(in_flight_first=True)
    before = _all_pages(repo, filters, 4)

    first = repo.list(filters, None, 4)
    shown = [r.id for r in first.rows]
    # Between pages: a row of the first page closes, the failed one is retried (reopens).
    clock.advance(30)
    repo.transition(shown[0], State.DETECTED, State.CANCELLED, action="cancel", actor="c")
    repo.transition(failed.id, State.FAILED, State.QUARANTINED, action="retry", actor="c")
    # And a new remediation arrives: it belongs to a fresh first page, not to these.
    repo.create(_new("gpu-node-new"), actor="c")

    seen = list(shown)
    cursor = first.next_cursor
    while cursor is not None:
        page = repo.list(filters, cursor, 4)
        seen.extend(r.id for r in page.rows)
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)), f"a row was shown twice: {seen}"
    assert seen == before


def test_filters(repo: Repository, clock: FakeClock) -> None:
    made = _seed(repo, clock)

    def ids(**filters: Any) -> list[int]:
        return _all_pages(repo, RemediationFilter(**filters), 8)

    def expect(pred: Callable[[RemediationRecord], bool]) -> list[int]:
        return _newest_first([r for r in made if pred(r)])

    assert ids(node="gpu-node-07") == expect(lambda r: r.node == "gpu-node-07")
    assert ids(node_search="NODE-1") == expect(lambda r: "node-1" in r.node)
    assert ids(node_search="%") == []
    assert ids(pool="infer-b") == expect(lambda r: r.pool == "infer-b")
    assert ids(states=frozenset({State.SUCCEEDED})) == expect(lambda r: r.state is State.SUCCEEDED)
    assert ids(signal_kind="thermal") == expect(lambda r: r.signal_kind == "thermal")
    assert ids(xid_code=48) == expect(lambda r: r.xid_code == 48)
    assert ids(policy="thermal") == expect(lambda r: r.policy == "thermal")
    assert ids(dry_run=True) == expect(lambda r: r.dry_run)
    start, end = made[5].created_at, made[20].created_at
    assert ids(created_from=start, created_to=end) == expect(lambda r: start <= r.created_at < end)
    assert ids(pool="train-a", signal_kind="xid", dry_run=False) == expect(
        lambda r: r.pool == "train-a" and r.signal_kind == "xid" and not r.dry_run
    )
    with pytest.raises(InvalidCursor):
        repo.list(RemediationFilter(), "garbage", 5)
    first = repo.list(RemediationFilter(), None, 5)
    # A cursor continues the listing it came from, whatever `in_flight_first` says (#39 item
    # 23: the schema cannot state a rule between the cursor and another parameter).
    after = repo.list(RemediationFilter(in_flight_first=True), first.next_cursor, 5)
    assert [r.id for r in after.rows] == _newest_first(made)[5:10]


def test_node_history(repo: Repository, clock: FakeClock) -> None:
    first = repo.create(_new("gpu-1"), actor="c")
    repo.transition(first.id, State.DETECTED, State.SUCCEEDED, action="ok", actor="c")
    clock.advance(3600)
    second = repo.create(_new("gpu-1"), actor="c")
    repo.create(_new("gpu-2"), actor="c")
    later = _signal("gpu-1").at(T0 + timedelta(minutes=5))
    assert repo.insert_signals([_signal("gpu-1"), later, _signal("gpu-2")], first.id) == 3
    assert repo.insert_signals([]) == 0
    history = repo.node_history("gpu-1")
    assert [r.id for r in history.remediations] == [second.id, first.id]
    assert [s.signal for s in history.signals] == [later, _signal("gpu-1")]
    assert {s.remediation_id for s in history.signals} == {first.id}
    window = repo.signals_for_node("gpu-1", since=T0 + timedelta(minutes=1))
    assert [s.signal for s in window] == [later]
    assert repo.signals_for_node("gpu-1", until=T0 + timedelta(minutes=1))[0].signal.gpu == 3


# -- aggregates ----------------------------------------------------------------------------------


def test_overview_aggregates(repo: Repository, clock: FakeClock) -> None:
    a = repo.create(_new("a", pool="p1"), actor="c")
    b = repo.create(_new("b", pool="p1", kind=SignalKind.THERMAL), actor="c")
    repo.create(_new("c", pool=None), actor="c")
    repo.transition(a.id, State.DETECTED, State.FAILED, action="fail", actor="c")
    clock.advance(2 * 86400)
    d = repo.create(_new("d", pool="p2"), actor="c")
    repo.transition(d.id, State.DETECTED, State.FAILED, action="fail", actor="c")
    repo.transition(d.id, State.FAILED, State.QUARANTINED, action="retry", actor="c")
    repo.transition(b.id, State.DETECTED, State.SUCCEEDED, action="ok", actor="c")

    overview = repo.overview()
    assert overview.by_state == {
        State.FAILED: 1,
        State.DETECTED: 1,
        State.SUCCEEDED: 1,
        State.QUARANTINED: 1,
    }
    # Finished a and b were created two days ago: outside a window that starts now.
    assert repo.counts_by_state(closed_since=clock.now()) == {
        State.DETECTED: 1,
        State.QUARANTINED: 1,
    }
    assert repo.counts_by_state() == overview.by_state
    # a failed 2 days ago; d failed today but was retried: neither is failed in the last 24 h.
    assert overview.failed_last_24h == 0
    assert overview.open_by_pool == {"": 1, "p2": 1}
    assert repo.failed_since(T0) == 2
    assert repo.daily_counts_by_kind(7) == tuple(
        sorted(
            [
                DailyCount(T0.date(), "thermal", 1),
                DailyCount(T0.date(), "xid", 2),
                DailyCount(T0.date() + timedelta(days=2), "xid", 1),
            ],
            key=lambda d: (d.day, d.signal_kind),
        )
    )
    assert [d.count for d in repo.daily_counts_by_kind(1)] == [1]


def test_time_to_repair_by_step(repo: Repository, clock: FakeClock) -> None:
    path = [
        (State.QUARANTINED, 10),
        (State.DRAINING, 60),
        (State.REPLACING, 120),
        (State.VERIFYING, 30),
        (State.SUCCEEDED, 0),
    ]
    for n, scale in enumerate([1, 2, 3]):
        created = repo.create(_new(f"gpu-{n}"), actor="c")
        state = State.DETECTED
        for target, seconds in path:
            clock.advance(5 * scale)
            repo.transition(created.id, state, target, action="step", actor="c")
            state = target
            clock.advance(seconds * scale)
        repo.append_event(created.id, action="note", actor="c")
    repo.create(_new("still-open"), actor="c")

    times = repo.time_to_repair(T0)
    assert times.overall is not None
    # detection → success: (5 * 5 + 10 + 60 + 120 + 30) * scale = 245 * scale
    assert (times.overall.count, times.overall.median_seconds) == (3, 490.0)
    assert times.overall.p90_seconds == pytest.approx(245 * 2.8)
    draining = times.by_step["draining"]
    assert (draining.count, draining.median_seconds) == (3, 130.0)
    assert times.by_step["detected"].median_seconds == 10.0
    assert "succeeded" not in times.by_step
    assert repo.time_to_repair(clock.now() + timedelta(seconds=1)).overall is None


# -- controller state, source health, policy sets ------------------------------------------------


def test_controller_switches(repo: Repository, clock: FakeClock) -> None:
    assert repo.controller_status().paused is False
    paused = repo.pause(by="alice", reason="maintenance window")
    assert (paused.paused, paused.paused_by, paused.paused_at) == (True, "alice", T0)
    clock.advance(60)
    resumed = repo.resume(by="bob", reason="done")
    assert (resumed.paused, resumed.paused_by, resumed.pause_reason) == (False, "bob", "done")
    tripped = repo.trip_breaker(reason="50% of pool cordoned in 5 min")
    assert tripped.breaker_tripped and tripped.breaker_tripped_at == T0 + timedelta(seconds=60)
    reset = repo.reset_breaker(by="carol", reason="false alarm")
    assert not reset.breaker_tripped
    assert (reset.breaker_reset_by, reset.breaker_reset_reason) == ("carol", "false alarm")
    assert reset.breaker_reason == "50% of pool cordoned in 5 min"
    leader = repo.record_leader("controller-0")
    assert (leader.leader_identity, leader.leader_seen_at) == ("controller-0", clock.now())
    assert repo.controller_status() == leader
    assert Repository(repo.session_factory, "cluster-b").controller_status().paused is False


def test_source_health_upserts(repo: Repository, clock: FakeClock) -> None:
    repo.record_source_health("prometheus", up=True)
    clock.advance(30)
    repo.record_source_health("prometheus", up=False, error="connection refused")
    repo.record_source_health("alertmanager", up=True)
    statuses = {s.source: s for s in repo.source_health()}
    assert list(statuses) == ["alertmanager", "prometheus"]
    prom = statuses["prometheus"]
    assert (prom.up, prom.error, prom.last_success_at) == (False, "connection refused", T0)
    assert prom.checked_at == T0 + timedelta(seconds=30)


def test_policy_sets_by_hash(repo: Repository, clock: FakeClock) -> None:
    files = {"xid.yaml": "policies:\n  - name: xid-fatal\n"}
    first = repo.record_policy_set(content_hash="h1", commit="abc", dirty=False, files=files)
    clock.advance(10)
    assert (
        repo.record_policy_set(content_hash="h1", commit="abc", dirty=False, files=files) == first
    )
    refused = repo.record_policy_set(
        content_hash="h2",
        commit="def",
        dirty=False,
        files={"xid.yaml": "policies: ["},
        status="refused",
        error="xid.yaml:1: unexpected end",
    )
    assert refused.id != first.id and refused.loaded_at == T0 + timedelta(seconds=10)
    assert repo.policy_set_by_hash("h1") == first
    assert repo.latest_policy_set() == refused
    assert repo.policy_set_by_hash("missing") is None
    with pytest.raises(ValueError):
        repo.record_policy_set(content_hash="h3", commit=None, dirty=True, files={}, status="meh")
