"""Planned ladders through the real Intake on a real (SQLite) store: a decision with a deadline
waits durably in `queued` (cause `planned`) for its moment, with its deadline and moment on the
timeline; it is admitted under its own budget and never reaches the storm breaker; a passed
deadline takes the ordinary path; a new Intake (a restart) finds the plan where it was."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.policy.planned import ANN_CHECKPOINT_INTERVAL, ANN_NEXT_CHECKPOINT
from remediator.remediation.intake import Intake, Inventory
from remediator.remediation.planned import PLANNED_ACTION, PodAnnotations, no_pods
from remediator.signals.maintenance import MaintenanceEvent, MaintenanceOrigin, MaintenanceStatus
from remediator.signals.model import Signal
from remediator.store import db
from remediator.store.repository import Repository

T0 = datetime(2026, 4, 1, 12, tzinfo=UTC)  # a Wednesday, noon UTC
H = timedelta(hours=1)
NIGHT = datetime(2026, 4, 2, 2, tzinfo=UTC)  # the first opening of the nightly window

POLICY = """\
policies:
  - name: row-remap-planned
    description: a row remap waits for a GPU reset
    why: reset when convenient, at the job's checkpoint
    match: {kind: maintenance, labels: {code: system-reboot}}
    when: {before_deadline: 2h, at_checkpoint: true, window: pool}
    actions:
      - action: cordon
      - action: checkpoint
        max_grace: 5m
      - action: drain
"""
SETTINGS = """\
storm_breaker: {enabled: true, max_new_faults: {count: 1}, window: 1h}
windows:
  nightly: {start: "0 2 * * *", duration: 4h, timezone: UTC, pools: [train]}
planned: {max_concurrent: 5, per_pool: 1}
"""
INVENTORY = Inventory(
    pools={"gpu-1": "train", "gpu-2": "train", "gpu-3": "infer"},
    gpus={"gpu-1": 8, "gpu-2": 8, "gpu-3": 8},
)


@pytest.fixture
def policies(tmp_path: Path) -> PolicySet:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "planned.yaml").write_text(POLICY)
    (directory / "settings.yaml").write_text(SETTINGS)
    return load_policy_dir(directory)


@pytest.fixture
def repository(sqlite_head_template: Path, tmp_path: Path) -> tuple[Repository, FakeClock]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    clock = FakeClock(T0)
    return Repository(db.make_session_factory(engine), "default", clock), clock


def remap(
    node: str,
    not_before: datetime,
    at: datetime = T0,
    status: MaintenanceStatus = MaintenanceStatus.SCHEDULED,
) -> Signal:
    """An EC2 system-reboot event on `node` whose window opens at `not_before`."""
    event = MaintenanceEvent(
        event_id=f"instance-event-{node}",
        code="system-reboot",
        origin=MaintenanceOrigin.AWS,
        instance_id=f"i-{node}",
        node=node,
        status=status,
        window_start=not_before,
        window_end=not_before + 2 * H,
        deadline=not_before + 7 * 24 * H,
    )
    return event.signal("aws-events", at)


def pods_of(table: Mapping[str, Sequence[Mapping[str, str]]]) -> PodAnnotations:
    return lambda node: table.get(node, ())


def test_a_planned_decision_waits_durably_for_the_window(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, clock = repository
    intake = Intake(repo, actor="test")
    result = intake.process([remap("gpu-1", T0 + 48 * H)], INVENTORY, policies, T0)
    (waiting,) = result.queued
    assert result.created == ()
    record = repo.get(waiting.id)
    assert record is not None and record.state is State.QUEUED
    assert record.queue_cause == "planned"
    assert record.next_attempt_at == NIGHT
    assert record.hold_reason is not None and record.hold_reason.startswith(
        "planned: at 2026-04-02T02:00:00+00:00 (no checkpoint inside a window in time: "
        "window nightly opens)"
    )
    (plan,) = [e.detail for e in record.events if e.action == PLANNED_ACTION]
    assert plan["deadline"] == "2026-04-03T12:00:00+00:00"
    assert plan["moment"] == NIGHT.isoformat() and plan["window"] == "nightly"
    # Announced maintenance is no storm: the breaker (tripping at 1 node here) saw nothing.
    status = repo.controller_status()
    assert not status.breaker_tripped and tuple(status.breaker_faults) == ()

    # Before the moment it stays; a restarted intake (nothing in memory) admits it at the moment.
    assert intake.admit_queued(INVENTORY, policies, NIGHT - timedelta(minutes=1)).created == ()
    clock.advance((NIGHT - T0).total_seconds())
    admitted = Intake(repo, actor="restarted").admit_queued(INVENTORY, policies, NIGHT)
    assert [r.id for r in admitted.created] == [waiting.id]
    after = repo.get(waiting.id)
    assert after is not None and after.state is State.DETECTED
    assert tuple(repo.controller_status().breaker_faults) == ()


def test_the_jobs_checkpoint_inside_the_window_is_the_moment(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, _ = repository
    announced = {ANN_NEXT_CHECKPOINT: "2026-04-01T12:40:00Z", ANN_CHECKPOINT_INTERVAL: "30m"}
    intake = Intake(repo, actor="test", pods=pods_of({"gpu-1": [announced]}))
    (waiting,) = intake.process([remap("gpu-1", T0 + 48 * H)], INVENTORY, policies, T0).queued
    assert waiting.id is not None
    record = repo.get(waiting.id)
    assert record is not None
    # 12:40 + k·30 min: the first inside 02:00 to 06:00 is 02:10.
    assert record.next_attempt_at == NIGHT + timedelta(minutes=10)
    (plan,) = [e.detail for e in record.events if e.action == PLANNED_ACTION]
    assert plan["checkpoint"] == "2026-04-02T02:10:00+00:00"
    assert plan["reason"] == "the job's checkpoint inside window nightly"


def test_a_new_checkpoint_announcement_moves_the_moment_on_the_timeline(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, _ = repository
    table: dict[str, list[Mapping[str, str]]] = {}
    intake = Intake(repo, actor="test", pods=pods_of(table))
    (waiting,) = intake.process([remap("gpu-1", T0 + 48 * H)], INVENTORY, policies, T0).queued
    table["gpu-1"] = [{ANN_NEXT_CHECKPOINT: "2026-04-02T03:00:00Z"}]
    intake.admit_queued(INVENTORY, policies, T0 + H)
    intake.admit_queued(INVENTORY, policies, T0 + 2 * H)  # unchanged: no second line
    record = repo.get(waiting.id)
    assert record is not None and record.next_attempt_at == NIGHT + H
    moments = [e.detail["moment"] for e in record.events if e.action == PLANNED_ACTION]
    assert moments == [NIGHT.isoformat(), (NIGHT + H).isoformat()]


def test_a_passed_deadline_takes_the_urgent_path(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, _ = repository
    result = Intake(repo, actor="test").process([remap("gpu-1", T0 - H)], INVENTORY, policies, T0)
    # The ordinary path: the breaker (tripping at one node here) counts it and holds it.
    (held,) = result.queued
    assert held.queue_cause == "breaker"
    assert [n for n, _ in repo.controller_status().breaker_faults] == ["gpu-1"]
    assert repo.controller_status().breaker_tripped


def test_the_planned_budget_holds_the_second_node_of_a_pool(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, clock = repository
    intake = Intake(repo, actor="test", pods=no_pods)
    signals = [remap("gpu-1", T0 + 48 * H), remap("gpu-2", T0 + 48 * H)]
    intake.process(signals, INVENTORY, policies, T0)
    clock.advance((NIGHT - T0).total_seconds())
    result = intake.admit_queued(INVENTORY, policies, NIGHT)
    assert [r.node for r in result.created] == ["gpu-1"]
    (held,) = [r for r in repo.list_open() if r.state is State.QUEUED]
    assert held.node == "gpu-2" and held.queue_cause == "planned"
    assert held.hold_reason == "planned budget: planned per_pool in train (1)"
    assert tuple(repo.controller_status().breaker_faults) == ()


def test_a_rescheduled_event_moves_the_plan_and_a_cancelled_one_closes_it(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, clock = repository
    intake = Intake(repo, actor="test")
    (waiting,) = intake.process([remap("gpu-1", T0 + 48 * H)], INVENTORY, policies, T0).queued
    # AWS moved the event earlier: it now starts before the night's window opens.
    clock.advance(3600)
    moved = remap("gpu-1", T0 + 12 * H, at=T0 + H, status=MaintenanceStatus.RESCHEDULED)
    intake.process([moved], INVENTORY, policies, T0 + H)
    record = repo.get(waiting.id)
    assert record is not None and record.state is State.QUEUED
    plans = [e.detail for e in record.events if e.action == PLANNED_ACTION]
    assert plans[-1]["deadline"] == (T0 + 12 * H).isoformat()
    assert plans[-1]["moment"] == (T0 + 12 * H - 2 * H - timedelta(minutes=5)).isoformat()
    # A restart keeps the newer version: it was linked to the remediation.
    Intake(repo, actor="restarted").admit_queued(INVENTORY, policies, T0 + H)
    again = repo.get(waiting.id)
    assert again is not None and again.next_attempt_at == T0 + 12 * H - 2 * H - timedelta(minutes=5)
    cancelled = remap("gpu-1", T0 + 12 * H, at=T0 + 2 * H, status=MaintenanceStatus.CANCELLED)
    intake.process([cancelled], INVENTORY, policies, T0 + 2 * H)
    closed = repo.get(waiting.id)
    assert closed is not None and closed.state is State.CANCELLED
    assert closed.events[-1].action == "maintenance_ended"


def test_a_passed_checkpoint_of_an_announced_interval_admits_the_plan(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    """The moment was the job's 02:10 checkpoint; a cycle at 02:10:30 finds the next one
    (02:40) announced too. The plan has come: it is admitted, not rewritten to the next."""
    repo, clock = repository
    announced = {ANN_NEXT_CHECKPOINT: "2026-04-01T12:40:00Z", ANN_CHECKPOINT_INTERVAL: "30m"}
    intake = Intake(repo, actor="test", pods=pods_of({"gpu-1": [announced]}))
    (waiting,) = intake.process([remap("gpu-1", T0 + 48 * H)], INVENTORY, policies, T0).queued
    moment = NIGHT + timedelta(minutes=10)
    late = moment + timedelta(seconds=30)
    clock.advance((late - T0).total_seconds())
    admitted = intake.admit_queued(INVENTORY, policies, late)
    assert [r.id for r in admitted.created] == [waiting.id]
    record = repo.get(waiting.id)
    assert record is not None and record.state is State.DETECTED
    moments = [e.detail["moment"] for e in record.events if e.action == PLANNED_ACTION]
    assert moments == [moment.isoformat()]  # never rolled forward to 02:40


def test_a_plan_held_past_its_moment_keeps_it_and_waits_for_the_next_window(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    """Held by the planned budget at its checkpoint, the plan keeps that moment (one line, not
    one per cycle); once the window has closed it waits for the next opening, not outside it."""
    repo, clock = repository
    announced = {ANN_NEXT_CHECKPOINT: "2026-04-01T12:40:00Z", ANN_CHECKPOINT_INTERVAL: "30m"}
    intake = Intake(repo, actor="test", pods=pods_of({"gpu-1": [announced], "gpu-2": []}))
    signals = [remap("gpu-1", T0 + 48 * H), remap("gpu-2", T0 + 48 * H)]
    intake.process(signals, INVENTORY, policies, T0)
    clock.advance((NIGHT - T0).total_seconds())
    (first,) = intake.admit_queued(INVENTORY, policies, NIGHT).created
    assert first.node == "gpu-2"  # its moment is the window's opening: it takes the budget
    (held,) = [r for r in repo.list_open() if r.node == "gpu-1"]
    for minutes in (11, 12, 13):
        intake.admit_queued(INVENTORY, policies, NIGHT + timedelta(minutes=minutes))
    record = repo.get(held.id)
    assert record is not None and record.state is State.QUEUED
    assert record.hold_reason == "planned budget: planned per_pool in train (1)"
    assert record.next_attempt_at == NIGHT + timedelta(minutes=10)
    plans = [e.detail["moment"] for e in record.events if e.action == PLANNED_ACTION]
    assert plans == [(NIGHT + timedelta(minutes=10)).isoformat()] * 2  # planned, then held
    # The window closed (06:00) with the budget still taken: the next night's checkpoint.
    intake.admit_queued(INVENTORY, policies, NIGHT + 5 * H)
    record = repo.get(held.id)
    assert record is not None and record.state is State.QUEUED
    assert record.next_attempt_at == NIGHT + 24 * H + timedelta(minutes=10)


def test_an_overdue_event_says_urgent_on_the_timeline(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, clock = repository
    intake = Intake(repo, actor="test")
    (opened,) = intake.process([remap("gpu-1", T0 - H)], INVENTORY, policies, T0).queued
    record = repo.get(opened.id)
    assert record is not None
    (plan,) = [e.detail for e in record.events if e.action == PLANNED_ACTION]
    assert plan["urgent"] is True and plan["deadline"] == (T0 - H).isoformat()
    assert plan["text"].startswith("urgent (the deadline has passed")
    # A waiting plan whose deadline passes says so too, once, as it takes the ordinary path.
    (waiting,) = intake.process([remap("gpu-2", T0 + 3 * H)], INVENTORY, policies, T0).queued
    clock.advance(4 * 3600)
    for minutes in (0, 1):
        intake.admit_queued(INVENTORY, policies, T0 + 4 * H + timedelta(minutes=minutes))
    record = repo.get(waiting.id)
    assert record is not None
    urgent = [e.detail for e in record.events if e.action == PLANNED_ACTION and e.detail["urgent"]]
    assert len(urgent) == 1 and urgent[0]["deadline"] == (T0 + 3 * H).isoformat()
