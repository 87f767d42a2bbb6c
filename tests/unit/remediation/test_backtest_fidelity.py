"""The replay skips readings that cannot change a decision (cold runs, event repeats the fold
drops). Proof that it skips nothing that matters: the real Intake, archiving as it decides on
15 s cycles, and the replay of its archive open the same remediations at the same times and
queue the same held decisions."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remediator.backtest.recording import from_database
from remediator.backtest.replay import replay
from remediator.clock import FakeClock
from remediator.policy.loader import load_policy_dir
from remediator.remediation.intake import Intake, Inventory
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.archive import SignalArchive
from remediator.store.records import RemediationFilter
from remediator.store.repository import Repository

T0 = datetime(2026, 4, 1, tzinfo=UTC)
POLL = timedelta(seconds=15)
POLICIES = """
policies:
  - name: hot
    description: hot GPU
    why: it throttles
    match:
      kind: thermal
      threshold: {above: 80, clear: 75, for: 5m}
    actions: [{action: cordon}]
  - name: flapping-links
    description: NVLink errors again and again
    why: the link is failing
    match:
      kind: nvlink
      burst: {count: 3, within: 12m}
    actions: [{action: cordon}]
  - name: off-bus
    description: XID 79
    why: the GPU is gone
    priority: 100
    match: {kind: xid, codes: [79]}
    actions: [{action: cordon}]
"""
SETTINGS = """
max_concurrent: 4
max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}
"""


def thermal(node: str, value: float, at: datetime) -> Signal:
    return Signal(
        node=node, kind=SignalKind.THERMAL, source="prometheus", observed_at=at, gpu=0, value=value
    )


def level(cycle: int, steps: list[tuple[int, float]]) -> float:
    """The value of the last step at or before `cycle`."""
    value = steps[0][1]
    for start, step_value in steps:
        if start <= cycle:
            value = step_value
    return value


def test_replay_decides_like_the_intake(sqlite_head_template: Path, tmp_path: Path) -> None:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    policies_dir = tmp_path / "policies"
    policies_dir.mkdir()
    (policies_dir / "p.yaml").write_text(POLICIES)
    (policies_dir / "settings.yaml").write_text(SETTINGS)
    policies = load_policy_dir(policies_dir)
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    factory = db.make_session_factory(engine)
    clock = FakeClock(T0)
    repository = Repository(factory, "default", clock)
    archive = SignalArchive(factory, "default")
    intake = Intake(repository, actor="test", archive=archive)
    nodes = [f"n{i}" for i in range(6)]
    inventory = Inventory(pools=dict.fromkeys(nodes, "p"), labels={n: {} for n in nodes})
    # n0: a breach, then 4.5 minutes in the hysteresis band (longer than the 2 min gap: only
    # every band reading keeps the streak), then a breach → fires 5 min after the first breach.
    # n1: a breach shorter than `for`, then band, then cleared, then a breach that holds.
    # n2: cold all along (skipped by the replay). n3: an NVLink counter held for 20 minutes.
    # n4 and n5: XID 79 held; with max_concurrent 4 (three open already) one of them waits.
    temps = {
        "n0": [(0, 60.0), (20, 81.0), (22, 77.0), (40, 82.0), (80, 60.0)],
        "n1": [(0, 60.0), (30, 81.0), (33, 77.0), (36, 70.0), (80, 85.0), (140, 60.0)],
        "n2": [(0, 55.0), (100, 56.0)],
    }
    held: set[tuple[str, datetime]] = set()
    for cycle in range(240):
        now = clock.now()
        signals = [thermal(n, level(cycle, steps), now) for n, steps in temps.items()]
        if 40 <= cycle < 120:
            signals.append(
                Signal(
                    node="n3", kind=SignalKind.NVLINK, source="prometheus", observed_at=now, gpu=1
                )
            )
        if 150 <= cycle < 390:
            signals += [
                Signal(
                    node=n,
                    kind=SignalKind.XID,
                    source="prometheus",
                    observed_at=now,
                    gpu=0,
                    code=79,
                )
                for n in ("n4", "n5")
            ]
        result = intake.process(signals, inventory, policies, now)
        held |= {(r.node, now) for r in result.queued}
        clock.advance(POLL.total_seconds())
    archive.flush()

    real = repository.list(RemediationFilter(), limit=100).rows
    happened = sorted((r.node, r.policy, r.created_at) for r in real)
    assert {n for n, _, _ in happened} == {"n0", "n1", "n3", "n4", "n5"}  # n5 queued
    assert ("n0", "hot", T0 + 40 * POLL) in happened
    assert held and {n for n, _ in held} == {"n5"}

    recording = from_database(factory, "default", T0, clock.now())
    replayed = replay(recording, [(T0, policies)])
    assert sorted((o.node, o.policy, o.at) for o in replayed.opened) == happened
    first_held: dict[str, datetime] = {}
    for hold in replayed.held:
        first_held.setdefault(hold.node, hold.at)
    assert set(first_held.items()) == held
    assert [o.admitted_at for o in replayed.opened if o.node == "n5"] == [None]  # still queued
    assert replayed.readings < 240 * 3  # most readings were skipped
    engine.dispose()


BOUNDARY_POLICIES = """
policies:
  - name: hot
    description: hot GPU
    why: it throttles
    match:
      kind: thermal
      threshold: {above: 80, for: 2m}
    actions: [{action: cordon}]
"""


def live_run(
    tmp_path: Path, policies_text: str, settings_text: str, cycles: int, reading: Callable
) -> tuple[db.sessionmaker[db.Session], Repository, SignalArchive, set[tuple[str, datetime]]]:
    """The real Intake, archiving as it decides; `reading(cycle)` gives (poll time, signals)."""
    policies_dir = tmp_path / "policies"
    policies_dir.mkdir()
    (policies_dir / "p.yaml").write_text(policies_text)
    (policies_dir / "settings.yaml").write_text(settings_text)
    policies = load_policy_dir(policies_dir)
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    factory = db.make_session_factory(engine)
    clock = FakeClock(T0)
    repository = Repository(factory, "default", clock)
    archive = SignalArchive(factory, "default")
    intake = Intake(repository, actor="test", archive=archive)
    nodes = [f"n{i}" for i in range(6)]
    inventory = Inventory(pools=dict.fromkeys(nodes, "p"), labels={n: {} for n in nodes})
    held: set[tuple[str, datetime]] = set()
    for cycle in range(cycles):
        now, signals = reading(cycle)
        clock.advance((now - clock.now()).total_seconds())
        result = intake.process(signals, inventory, policies, now)
        held |= {(r.node, now) for r in result.queued}
    return factory, repository, archive, held


def test_replay_decides_like_the_intake_at_the_for_boundary(
    sqlite_head_template: Path, tmp_path: Path
) -> None:
    """A 15 s scrape read by polls that come a little early or late: each reading carries its
    sample's timestamp, so a `for: 2m` completes exactly on a sample 120 s after the first
    breach. The replay must complete it on that same reading, not a cycle later."""
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    jitter = [2.9, 0.1, 1.7, 0.4, 2.2, 0.0, 1.1, 2.6, 0.3]
    starts = {"n0": 10, "n1": 31, "n2": 52, "n3": 73, "n4": 94}

    def reading(cycle: int) -> tuple[datetime, list[Signal]]:
        sample = T0 + cycle * POLL  # the scrape's own timestamp
        poll = sample + timedelta(seconds=jitter[cycle % len(jitter)])
        signals = [
            thermal(node, 85.0 if start <= cycle < start + 15 else 60.0, sample)
            for node, start in starts.items()
        ]
        return poll, signals

    factory, repository, archive, _ = live_run(tmp_path, BOUNDARY_POLICIES, SETTINGS, 130, reading)
    archive.flush()
    real = repository.list(RemediationFilter(), limit=100).rows
    happened = sorted((r.node, r.policy, r.created_at) for r in real)
    assert {n for n, _, _ in happened} == set(starts)
    policies = load_policy_dir(tmp_path / "policies")
    recording = from_database(factory, "default", T0, T0 + 200 * POLL)
    replayed = replay(recording, [(T0, policies)])
    assert sorted((o.node, o.policy, o.at) for o in replayed.opened) == happened


def test_replay_sees_faults_still_going(sqlite_head_template: Path, tmp_path: Path) -> None:
    """Backtested right after an incident, while the controller still runs: the XIDs still
    held and the readings still hot are in the record, and so is the budget hold they made."""
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    settings = """
max_concurrent: 1
max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}
"""

    def reading(cycle: int) -> tuple[datetime, list[Signal]]:
        now = T0 + cycle * POLL
        signals = [thermal(n, 85.0 if cycle >= 20 and n == "n0" else 60.0, now) for n in ("n0",)]
        if cycle >= 45:
            signals += [
                Signal(node=n, kind=SignalKind.XID, source="dcgm", observed_at=now, gpu=0, code=79)
                for n in ("n4", "n5")
            ]
        return now, signals

    factory, repository, _, held = live_run(tmp_path, POLICIES, settings, 60, reading)
    # No flush: the controller is still running, every fault above still going.
    real = repository.list(RemediationFilter(), limit=100).rows
    happened = sorted((r.node, r.policy, r.created_at) for r in real)
    assert {n for n, _, _ in happened} == {"n0", "n4", "n5"}
    assert held
    policies = load_policy_dir(tmp_path / "policies")
    recording = from_database(factory, "default", T0, T0 + 60 * POLL)
    replayed = replay(recording, [(T0, policies)])
    assert sorted((o.node, o.policy, o.at) for o in replayed.opened) == happened
    first_held: dict[str, datetime] = {}
    for hold in replayed.held:
        first_held.setdefault(hold.node, hold.at)
    assert set(first_held.items()) == held
