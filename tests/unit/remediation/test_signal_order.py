"""#39 item 10: an XID 13 logged 100 s before an XID 79 and delivered in the same intake joined
the XID 79's remediation, while delivered apart it opened its own notify. Events are decided in
the order they were observed, whatever the batching: the real Intake on the shipped policies,
one intake against two, gives the same remediations."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.remediation.intake import Intake, IntakeResult, Inventory
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.records import RemediationFilter
from remediator.store.repository import Repository

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 4, 1, tzinfo=UTC)
NODE = "gpu-a1"
INVENTORY = Inventory(pools={NODE: "train"}, gpus={NODE: 8})


@pytest.fixture
def policies() -> PolicySet:
    return load_policy_dir(ROOT / "policies")


def fresh_intake(template: Path, directory: Path) -> tuple[Intake, Repository]:
    directory.mkdir()
    shutil.copyfile(template, directory / "remediator.db")
    engine = db.make_engine(f"sqlite:///{directory / 'remediator.db'}")
    repository = Repository(db.make_session_factory(engine), "default", FakeClock(T0))
    return Intake(repository, actor="test"), repository


def xid(code: int, gpu: int, at: datetime, source: str = "agent") -> Signal:
    return Signal(node=NODE, kind=SignalKind.XID, source=source, observed_at=at, gpu=gpu, code=code)


def run_notifies(repository: Repository, result: IntakeResult) -> None:
    """What the controller's advance does to a notify-only remediation before the next intake:
    it notifies and is done."""
    for record in result.created:
        if [step.get("action") for step in record.ladder] == ["notify"]:
            repository.transition(
                record.id, State.DETECTED, State.SUCCEEDED, action="test", actor="test"
            )


def outcome(repository: Repository) -> list[tuple[str, tuple[int | None, ...]]]:
    rows = repository.list(RemediationFilter(), limit=50).rows
    found = [repository.get(r.id) for r in rows]
    return sorted((r.policy, tuple(s.code for s in r.signals)) for r in found if r is not None)


def decide(
    intake: Intake, repository: Repository, batches: Sequence[Sequence[Signal]], policies: PolicySet
) -> None:
    now = T0 + timedelta(seconds=101)
    for batch in batches:
        result = intake.process(batch, INVENTORY, policies, now)
        run_notifies(repository, result)
        while result.waiting:  # the controller runs the next intake at once
            result = intake.process((), INVENTORY, policies, now)
            run_notifies(repository, result)


def test_events_are_decided_in_the_order_observed_whatever_the_batching(
    sqlite_head_template: Path, tmp_path: Path, policies: PolicySet
) -> None:
    # One intake: the agent's XID 13 and a scraped XID 79 a poll gathered together.
    app_fault, fallen = xid(13, 0, T0), xid(79, 1, T0 + timedelta(seconds=100), "prometheus")
    together, repo_together = fresh_intake(sqlite_head_template, tmp_path / "together")
    decide(together, repo_together, [[fallen, app_fault]], policies)
    apart, repo_apart = fresh_intake(sqlite_head_template, tmp_path / "apart")
    decide(apart, repo_apart, [[app_fault], [fallen]], policies)

    expected = [("xid-79-fallen-off-bus", (79,)), ("xid-application-faults", (13,))]
    assert outcome(repo_apart) == expected
    assert outcome(repo_together) == expected
    shown = {e.signal.code: e.disposition for e in repo_together.signals_for_node(NODE)}
    assert shown[13] is not None and shown[13].startswith("opened #")


def test_a_later_event_joins_what_the_earlier_one_opened(
    sqlite_head_template: Path, tmp_path: Path, policies: PolicySet
) -> None:
    """The other order: the XID 79 first opens its repair, the XID 13 after it joins it, in one
    intake as apart."""
    fallen, app_fault = xid(79, 1, T0), xid(13, 0, T0 + timedelta(seconds=100))
    intake, repository = fresh_intake(sqlite_head_template, tmp_path / "one")
    decide(intake, repository, [[app_fault, fallen]], policies)
    assert outcome(repository) == [("xid-79-fallen-off-bus", (79,))]
    shown = {e.signal.code: e.disposition for e in repository.signals_for_node(NODE)}
    (opened,) = repository.list(RemediationFilter(), limit=5).rows
    assert shown[13] == f"joined #{opened.id}"
