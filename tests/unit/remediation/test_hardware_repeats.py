"""Issue 28, end to end through the real Intake, its ledger and the shipped policies on SQLite:
a GPU that fails again after its machine was repaired and came back under a new node name is
the same GPU (straight to replacement, its machine quarantined); a GCE instance recreated under
the same name is new hardware, and another GPU behind the same node name is no repeat."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.kube.objects import Node
from remediator.ledger.identity import GCE_INSTANCE_ID
from remediator.ledger.store import Ledger
from remediator.model.states import State
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.remediation.intake import Intake, Inventory
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.repository import Repository

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 4, 1, tzinfo=UTC)
GPU_A = "GPU-0d6f1c2a-0000-4000-8000-000000000001"
GPU_B = "GPU-7e1a2b3c-0000-4000-8000-000000000002"


@pytest.fixture
def policies() -> PolicySet:
    return load_policy_dir(ROOT / "policies")


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


def gce_node(name: str, instance: str) -> Node:
    return Node(
        name=name,
        uid=f"uid-{name}-{instance}",
        resource_version="1",
        provider_id=f"gce://proj/us-central1-a/{name}",
        annotations={GCE_INSTANCE_ID: instance},
        labels={"cloud.google.com/gke-nodepool": "train"},
    )


def inventory(*nodes: Node) -> Inventory:
    return Inventory.from_nodes(nodes, "cloud.google.com/gke-nodepool")


def xid79(node: str, uuid: str, at: datetime) -> Signal:
    """The agent's XID: the kernel line's PCI address and the UUID the driver mapped to it."""
    return Signal(
        node=node,
        kind=SignalKind.XID,
        source="agent",
        observed_at=at,
        gpu=1,
        gpu_uuid=uuid,
        code=79,
        labels={"pci": "0000:2a:00"},
    )


def finish(repository: Repository, remediation_id: int) -> None:
    repository.transition(
        remediation_id, State.DETECTED, State.SUCCEEDED, action="test", actor="test"
    )


def test_the_same_gpu_under_a_new_node_name_goes_straight_to_replacement_and_quarantine(
    world: tuple[Intake, Repository, Ledger, FakeClock], policies: PolicySet
) -> None:
    intake, repository, ledger, clock = world
    first = intake.process(
        [xid79("gpu-a1", GPU_A, T0)], inventory(gce_node("gpu-a1", "111")), policies, T0
    )
    (opened,) = first.created
    assert opened.policy == "xid-79-fallen-off-bus"
    finish(repository, opened.id)
    # Repaired (the same instance, the same board) and back as gpu-a9: the GPU fails again.
    later = T0 + timedelta(hours=6)
    clock.advance(6 * 3600)
    again = intake.process(
        [xid79("gpu-a9", GPU_A, later)], inventory(gce_node("gpu-a9", "111")), policies, later
    )
    (repeat,) = again.created
    assert repeat.policy == "xid-79-repeated"
    assert "replace" in [step["action"] for step in repeat.ladder]
    assert f"GPU {GPU_A}" in repeat.reason
    machine = ledger.machine("gce:111")
    assert machine is not None and machine.quarantined_at == later
    assert f"remediation #{repeat.id}" in (machine.quarantine_reason or "")
    life = ledger.gpu(GPU_A)
    assert life is not None
    assert [p.node for p in life.placements] == ["gpu-a1", "gpu-a9"]
    assert [link.ref_id for link in life.links if link.subject == "remediation"] == [
        opened.id,
        repeat.id,
    ]


def test_a_recreated_instance_under_the_same_name_is_new_hardware(
    world: tuple[Intake, Repository, Ledger, FakeClock], policies: PolicySet
) -> None:
    intake, repository, ledger, clock = world
    first = intake.process(
        [xid79("gpu-a1", GPU_A, T0)], inventory(gce_node("gpu-a1", "111")), policies, T0
    )
    (opened,) = first.created
    finish(repository, opened.id)
    later = T0 + timedelta(hours=6)
    clock.advance(6 * 3600)
    # Same name, same providerID, a new instance id and new GPUs: a first fault, not a repeat.
    again = intake.process(
        [xid79("gpu-a1", GPU_B, later)], inventory(gce_node("gpu-a1", "222")), policies, later
    )
    assert [r.policy for r in again.created] == ["xid-79-fallen-off-bus"]
    assert not ledger.quarantined("gce:111") and not ledger.quarantined("gce:222")
    old = ledger.gpu(GPU_A)
    assert old is not None and old.placements[-1].to_at == later
    assert old.conflicts == ()  # new hardware, not a swapped card
    new = ledger.gpu(GPU_B)
    assert new is not None and new.placements[-1].machine_id == "gce:222"
