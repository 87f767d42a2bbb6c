"""Issue 22 item 11: a second XID 79 on the same GPU within the week was accepted and opened
nothing, while the same fault on another GPU opened `xid-79-repeated`. The reason is the fold: the
DCGM XID gauge holds its last code, so an (node, GPU, kind, code) seen again within the fold
window (5 minutes) is taken for the first one still being reported and dropped; another GPU is
another key. The real Intake on the shipped policies (cooldown 1 s) shows it, and every accepted
signal that opens nothing now carries its disposition."""

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

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 4, 1, tzinfo=UTC)
NODE = "gpu-a1"


@pytest.fixture
def policies(tmp_path: Path) -> PolicySet:
    target = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", target, ignore=shutil.ignore_patterns("tests"))
    settings = (target / "settings.yaml").read_text()
    kept = [line for line in settings.splitlines() if not line.startswith("default_cooldown:")]
    (target / "settings.yaml").write_text("\n".join([*kept, "default_cooldown: 1s", ""]))
    return load_policy_dir(target)


@pytest.fixture
def world(sqlite_head_template: Path, tmp_path: Path) -> tuple[Intake, Repository, FakeClock]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    clock = FakeClock(T0)
    repository = Repository(db.make_session_factory(engine), "default", clock)
    return Intake(repository, actor="test"), repository, clock


def xid79(gpu: int, at: datetime) -> Signal:
    return Signal(node=NODE, kind=SignalKind.XID, source="push", observed_at=at, gpu=gpu, code=79)


INVENTORY = Inventory(pools={NODE: "train", "gpu-a2": "train"}, gpus={NODE: 8, "gpu-a2": 8})


def finish(repository: Repository, remediation_id: int) -> None:
    repository.transition(
        remediation_id, State.DETECTED, State.SUCCEEDED, action="test", actor="test"
    )


def test_the_same_gpu_again_within_the_fold_window_is_folded_and_says_so(
    world: tuple[Intake, Repository, FakeClock], policies: PolicySet
) -> None:
    intake, repository, clock = world
    first = intake.process([xid79(1, T0)], INVENTORY, policies, T0)
    (opened,) = first.created
    assert opened.policy == "xid-79-fallen-off-bus"
    finish(repository, opened.id)

    later = T0 + timedelta(seconds=150)
    clock.advance(150)
    again = intake.process([xid79(1, later)], INVENTORY, policies, later)
    assert again.created == () and again.queued == ()  # the defect as reported: nothing opened
    other = intake.process([xid79(2, later)], INVENTORY, policies, later)
    assert [r.policy for r in other.created] == ["xid-79-repeated"]

    shown = {
        (entry.signal.gpu, entry.signal.observed_at): entry.disposition
        for entry in repository.signals_for_node(NODE)
    }
    assert shown[(1, T0)] == f"opened #{opened.id}"
    assert shown[(1, later)].startswith("folded: the same XID 79 on GPU 1 was taken in at ")
    assert "fold window 5m" in shown[(1, later)]
    assert shown[(2, later)] == f"opened #{other.created[0].id}"
    assert again.dispositions == {"folded": 1}


def test_joined_cooldown_and_no_policy_are_recorded_with_the_signal(
    world: tuple[Intake, Repository, FakeClock], policies: PolicySet
) -> None:
    intake, repository, clock = world
    (opened,) = intake.process([xid79(3, T0)], INVENTORY, policies, T0).created
    joined = xid79(4, T0 + timedelta(seconds=1))
    clock.advance(1)
    result = intake.process([joined], INVENTORY, policies, T0 + timedelta(seconds=1))
    assert result.dispositions == {"joined": 1}

    # An application fault's notify, then the same fault on another GPU within its 30m cooldown.
    def xid13(gpu: int, at: datetime) -> Signal:
        return Signal(
            node="gpu-a2", kind=SignalKind.XID, source="push", observed_at=at, gpu=gpu, code=13
        )

    at = T0 + timedelta(seconds=2)
    clock.advance(1)
    (notify,) = intake.process([xid13(0, at)], INVENTORY, policies, at).created
    finish(repository, notify.id)
    later = at + timedelta(minutes=1)
    result = intake.process([xid13(5, later)], INVENTORY, policies, later)
    assert result.created == () and result.dispositions == {"cooldown": 1}
    unknown_kind = Signal(
        node="gpu-a2", kind=SignalKind.XID, source="push", observed_at=later, gpu=6, code=999
    )
    assert intake.process([unknown_kind], INVENTORY, policies, later).dispositions == {
        "no_policy": 1
    }

    mine = {e.signal.gpu: e.disposition for e in repository.signals_for_node(NODE)}
    assert mine[4] == f"joined #{opened.id}"
    theirs = {e.signal.gpu: e.disposition for e in repository.signals_for_node("gpu-a2")}
    assert theirs[0] == f"opened #{notify.id}"
    assert theirs[5] == (
        f"in cooldown until {(at + timedelta(minutes=30)).isoformat()} (xid-application-faults)"
    )
    assert theirs[6] == "no policy matches"


def test_a_signal_whose_policy_lost_to_another_on_the_node_joins_what_opened(
    world: tuple[Intake, Repository, FakeClock], policies: PolicySet
) -> None:
    """XID 79 and an application XID 13 in one cycle: the XID 79 policy wins the node, and the
    XID 13 says it joined that remediation, not that nothing matched."""
    intake, repository, _ = world
    app_fault = Signal(
        node=NODE, kind=SignalKind.XID, source="push", observed_at=T0, gpu=0, code=13
    )
    result = intake.process([xid79(1, T0), app_fault], INVENTORY, policies, T0)
    (opened,) = result.created
    assert result.dispositions == {"opened": 1, "joined": 1}
    shown = {e.signal.code: e.disposition for e in repository.signals_for_node(NODE)}
    assert shown == {79: f"opened #{opened.id}", 13: f"joined #{opened.id}"}
