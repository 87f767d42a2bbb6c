"""A scale-up through the real Intake on a real (SQLite) store (#26): 25 machines that join
with the startup taint at once are no storm. Their validations never reach the breaker nor the
fault budgets; they are admitted in waves within `new_machines`, and a real fault meanwhile
still gets its remediation."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.remediation.intake import Intake, Inventory
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.repository import Repository

T0 = datetime(2026, 4, 1, 12, tzinfo=UTC)
TAINT = "remediator.io/unvalidated"
POLICIES = """\
policies:
  - name: new-machine-validation
    description: joined with the startup taint and no remediation
    why: new machines arrive bad
    match: {kind: unvalidated}
    actions:
      - action: validate
        nccl: false
      - action: uncordon
  - name: xid-79
    description: fallen off the bus
    why: the GPU is gone
    match: {kind: xid, codes: [79]}
    actions:
      - action: cordon
"""
SETTINGS = f"""\
max_concurrent: 2
max_unhealthy: {{per_pool: {{count: 1}}, cluster: {{count: 1}}}}
storm_breaker: {{enabled: true, max_new_faults: {{count: 3}}, window: 1h}}
new_machines: {{max_concurrent: 10}}
startup_taint: {TAINT}=true:NoSchedule
"""
OLD = [f"gpu-old-{i}" for i in range(4)]
NEW = [f"gpu-new-{i:02}" for i in range(25)]
# The new machines carry the startup taint and are cordoned by nobody, but a tainted node counts
# as out of service like any cordoned one: it must not eat the fault budgets either.
INVENTORY = Inventory(
    pools={n: "train" for n in [*OLD, *NEW]},
    gpus={n: 8 for n in [*OLD, *NEW]},
    cordoned=frozenset(NEW),
)


@pytest.fixture
def policies(tmp_path: Path) -> PolicySet:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "p.yaml").write_text(POLICIES)
    (directory / "settings.yaml").write_text(SETTINGS)
    return load_policy_dir(directory)


@pytest.fixture
def repository(sqlite_head_template: Path, tmp_path: Path) -> tuple[Repository, FakeClock]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    clock = FakeClock(T0)
    return Repository(db.make_session_factory(engine), "default", clock), clock


def joined(node: str, at: datetime) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind.UNVALIDATED,
        source="nodes",
        observed_at=at,
        labels={"taint": TAINT},
    )


def test_a_scale_up_of_25_validates_in_waves_and_trips_no_breaker(
    repository: tuple[Repository, FakeClock], policies: PolicySet
) -> None:
    repo, clock = repository
    intake = Intake(repo, actor="test")
    result = intake.process([joined(n, T0) for n in NEW], INVENTORY, policies, T0)
    assert sorted(r.node for r in result.created) == NEW[:10]
    assert len(result.queued) == 15
    status = repo.controller_status()
    assert not status.breaker_tripped and tuple(status.breaker_faults) == ()
    (held, *_) = [r for r in repo.list_open() if r.state is State.QUEUED]
    assert held.hold_reason == "new-machine budget: new-machine max_concurrent (10)"

    # A real fault meanwhile: the validations took none of the fault budgets (count 1 here).
    fault = Signal(node="gpu-old-0", kind=SignalKind.XID, source="dcgm", observed_at=T0, code=79)
    later = T0 + timedelta(minutes=1)
    clock.advance(60)
    again = intake.process([fault], INVENTORY, policies, later)
    assert [r.node for r in again.created] == ["gpu-old-0"]

    # The first wave ends (validated, returned): the next wave is admitted, still within 10.
    for record in result.created:
        repo.transition(record.id, State.DETECTED, State.SUCCEEDED, action="test", actor="test")
    wave = intake.admit_queued(INVENTORY, policies, later)
    assert sorted(r.node for r in wave.created) == NEW[10:20]
    assert not repo.controller_status().breaker_tripped
