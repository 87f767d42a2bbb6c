"""`repeat: {by: machine}` counts the machine now in the slot (#39 item 1), through the real
Intake and Ledger on SQLite. The node-pool API brings a replacement tray back under its slot's
name and providerID; the ledger knows the new tray as a machine of its own (identity.brought_by,
recorded as remediation/machine_hold.py records it), so its first fault is no repeat of the old
tray's, and two faults of the fresh tray are."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.kube.objects import Node, NodeCondition
from remediator.ledger.identity import brought_by, machine_id
from remediator.ledger.store import Ledger
from remediator.model.states import State
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.remediation.intake import Intake, Inventory
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.records import RemediationRecord
from remediator.store.repository import Repository

T0 = datetime(2026, 4, 1, 12, tzinfo=UTC)
TRAY = "nvl-r0-t01"
PROVIDER_ID = f"simcloud://nvl/{TRAY}"
POLICIES = """\
policies:
  - name: tray-fault
    description: a fault of the tray
    why: a first fault is fenced and looked at
    match: {kind: xid, codes: [94]}
    priority: 10
    actions:
      - action: cordon
  - name: tray-fault-again
    description: the same tray faulted again within the hour
    why: a tray that faults twice is hardware, wherever it sits
    match:
      kind: xid
      codes: [94]
      repeat: {count: 2, within: 1h, by: machine, of: [tray-fault, tray-fault-again]}
    priority: 20
    actions:
      - action: cordon
"""
# No policy counts by machine: a repeat by GPU of a fault that names no GPU still does.
GPU_POLICIES = """\
policies:
  - name: gpu-fault
    description: a fault of a GPU
    why: a first fault is fenced and looked at
    match: {kind: xid, codes: [63]}
    priority: 10
    actions:
      - action: cordon
  - name: gpu-fault-again
    description: the same GPU faulted again within the hour
    why: a GPU that faults twice is hardware, wherever it sits
    match:
      kind: xid
      codes: [63]
      repeat: {count: 2, within: 1h, by: gpu, of: [gpu-fault, gpu-fault-again]}
    priority: 20
    actions:
      - action: cordon
"""
SETTINGS = """\
max_concurrent: 10
max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}
default_cooldown: 1s
"""


def policy_set(directory: Path, text: str) -> PolicySet:
    directory.mkdir()
    (directory / "p.yaml").write_text(text)
    (directory / "settings.yaml").write_text(SETTINGS)
    return load_policy_dir(directory)


@pytest.fixture
def policies(tmp_path: Path) -> PolicySet:
    return policy_set(tmp_path / "policies", POLICIES)


@pytest.fixture
def world(
    sqlite_head_template: Path, tmp_path: Path
) -> tuple[Intake, Repository, Ledger, FakeClock]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    clock = FakeClock(T0)
    factory = db.make_session_factory(engine)
    repository = Repository(factory, "default", clock)
    ledger = Ledger(factory, "default", clock)
    return Intake(repository, actor="test", ledger=ledger), repository, ledger, clock


def tray(uid: str) -> Inventory:
    """The slot's Node: the same name and providerID for every tray that sits in it."""
    node = Node(
        name=TRAY,
        uid=uid,
        resource_version="1",
        provider_id=PROVIDER_ID,
        labels={"pool": "nvl"},
        conditions=(NodeCondition("Ready", "True"),),
        gpus=4,
    )
    return Inventory.from_nodes([node], "pool")


def fault(
    intake: Intake,
    repo: Repository,
    inventory: Inventory,
    policies: PolicySet,
    at: datetime,
    *,
    code: int,
    gpu: int,
) -> RemediationRecord:
    """One XID (another GPU each time: the same fault again within the fold window counts once)
    and the remediation it opens, ended at once."""
    signal = Signal(
        node=TRAY, kind=SignalKind.XID, source="push", observed_at=at, gpu=gpu, code=code
    )
    (opened,) = intake.process([signal], inventory, policies, at).created
    repo.transition(opened.id, State.DETECTED, State.SUCCEEDED, action="test", actor="test")
    return opened


def replaced(ledger: Ledger, remediation: RemediationRecord, at: datetime) -> str:
    """What the controller's own replacement records (MachineHolds on `replace_done`): the tray
    it brought into the slot is a machine of its own."""
    own = machine_id(PROVIDER_ID, {})
    assert own is not None
    fresh = brought_by(own, remediation.id, 1)
    ledger.observe_machine(TRAY, fresh, at, provider_id=PROVIDER_ID)
    return fresh


def test_a_fresh_trays_first_fault_is_no_repeat_of_the_tray_it_replaced(
    world: tuple[Intake, Repository, Ledger, FakeClock], policies: PolicySet
) -> None:
    intake, repo, ledger, clock = world
    first = fault(intake, repo, tray("uid-1"), policies, T0, code=94, gpu=0)
    assert first.policy == "tray-fault"
    fresh = replaced(ledger, first, T0 + timedelta(minutes=5))
    new_slot = tray("uid-2")
    later = T0 + timedelta(minutes=10)
    clock.advance(600)
    second = fault(intake, repo, new_slot, policies, later, code=94, gpu=1)
    assert second.policy == "tray-fault", second.reason
    assert not ledger.quarantined(fresh)
    last = later + timedelta(minutes=10)
    clock.advance(600)
    third = fault(intake, repo, new_slot, policies, last, code=94, gpu=2)
    assert third.policy == "tray-fault-again"
    assert f"remediation #2 of machine {fresh} within 1h" in third.reason
    assert ledger.quarantined(fresh) and not ledger.quarantined(machine_id(PROVIDER_ID, {}) or "")


def test_a_repeat_by_gpu_of_a_fault_naming_no_gpu_counts_by_the_machine(
    world: tuple[Intake, Repository, Ledger, FakeClock], tmp_path: Path
) -> None:
    """No UUID known for the GPU (no agent, no sighting): the machine is counted, as the rule
    says, not nothing."""
    intake, repo, _, clock = world
    policies = policy_set(tmp_path / "gpu-policies", GPU_POLICIES)
    slot = tray("uid-1")
    first = fault(intake, repo, slot, policies, T0, code=63, gpu=0)
    later = T0 + timedelta(minutes=10)
    clock.advance(600)
    second = intake.process(
        [Signal(node=TRAY, kind=SignalKind.XID, source="push", observed_at=later, gpu=1, code=63)],
        slot,
        policies,
        later,
    )
    (again,) = second.created
    assert first.policy == "gpu-fault"
    assert again.policy == "gpu-fault-again"
    assert "remediation #2 of machine" in again.reason
