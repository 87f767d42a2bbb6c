"""The hardware agents name in their heartbeats (issue #28): the digest that stands for it, the
controller asking for it whole only when it does not hold that digest, the ledger written only
on change and at most once per flush (counted at the database), and the arrival fence reading
it, whichever replica took the heartbeat."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import Engine, event

from remediator.actions.quarantine import QUARANTINE_TAINT
from remediator.clock import FakeClock
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.ledger.hold import arrival_machine
from remediator.ledger.identity import DIGEST_PATTERN, GpuIdentity, HostHardware
from remediator.ledger.sightings import FLUSH_BATCH, HardwareSightings, wants_hardware
from remediator.ledger.store import FENCED, HOLD, PLACED, Ledger
from remediator.policy.schema import MachineHoldSettings
from remediator.remediation.machine_hold import MachineHolds
from remediator.store import db
from remediator.store.repository import Repository
from tests.unit.ledger.test_machine_hold import StubKube

T0 = datetime(2026, 11, 1, tzinfo=UTC)
A = GpuIdentity("GPU-aaaaaaaa-0000-0000-0000-000000000001", "0000:18:00", 0, "1650000000001")
B = GpuIdentity("GPU-bbbbbbbb-0000-0000-0000-000000000002", "0000:2a:00", 1, model="H100")
HOST = HostHardware("SN-0001", (A, B))


class Writes:
    """Statements that wrote the ledger's tables, as the database driver saw them."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[str] = []
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        words = statement.lstrip().upper()
        if words.startswith(("INSERT", "UPDATE", "DELETE")) and "LEDGER_" in words:
            self.statements.append(words.split("(")[0].strip())


@pytest.fixture
def engine(sqlite_head_template: Path, tmp_path: Path) -> Iterator[Engine]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    built = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    yield built
    built.dispose()


def replica(engine: Engine, clock: FakeClock) -> tuple[Ledger, HardwareSightings]:
    """One controller replica's ledger and sightings over the shared database."""
    ledger = Ledger(db.make_session_factory(engine), "default", clock)
    return ledger, HardwareSightings(ledger, clock)


def test_the_digest_names_the_hardware_whatever_the_order_read() -> None:
    digest = HOST.digest
    assert re.match(DIGEST_PATTERN, digest)
    assert HostHardware("SN-0001", (B, A)).digest == digest
    assert HostHardware("SN-0002", (A, B)).digest != digest
    assert HostHardware("SN-0001", (A,)).digest != digest
    assert HOST.machine == "dmi:SN-0001" and HostHardware(None).machine is None
    # Unknown fields are left out of the wire, not sent as null.
    assert HOST.wire() == {
        "dmi_serial": "SN-0001",
        "gpus": [
            {"uuid": A.uuid, "pci_bus_id": "0000:18:00", "index": 0, "serial": "1650000000001"},
            {"uuid": B.uuid, "pci_bus_id": "0000:2a:00", "index": 1, "model": "H100"},
        ],
    }


def test_the_whole_identity_is_asked_only_for_a_digest_not_held() -> None:
    known = {"n1": "0123456789abcdef"}
    assert not wants_hardware(known, "n1", "0123456789abcdef")
    assert wants_hardware(known, "n1", "fedcba9876543210")  # new hardware
    assert wants_hardware(known, "n2", "0123456789abcdef")  # a node not heard whole here
    assert not wants_hardware(known, "n2", None)  # an agent that reads no identity


def test_the_databases_dmi_serial_outranks_this_replicas_view() -> None:
    assert arrival_machine("dmi:SN-1", "dmi:SN-0") == "dmi:SN-1"  # a stale picture
    assert arrival_machine("dmi:SN-1", "static:gpu-a1") == "dmi:SN-1"  # a name, not hardware
    assert arrival_machine("gce:111", "gce:222") == "gce:222"  # the Node's own is fresher
    assert arrival_machine(None, "dmi:SN-0") == "dmi:SN-0"
    assert arrival_machine(None, None) is None
    # On a cloud the instance id is the machine; its VM's DMI serial does not replace it.
    assert arrival_machine("dmi:ec2abc", "aws:i-0abc") == "aws:i-0abc"


def test_a_cloud_instance_keeps_its_id_whichever_is_heard_first(engine: Engine) -> None:
    """A VM's agent reports a DMI serial too (the hypervisor's, as unique as the instance): the
    instance id the Node names stays the machine, whether the intake or the heartbeat came
    first; a bare-metal node's serial replaces its providerID."""
    clock = FakeClock(T0)
    ledger, sightings = replica(engine, clock)
    ledger.observe_machine("cloud-a", "aws:i-0abc", T0)
    cloud = HostHardware("ec2abcd-1234", (A,))
    assert not sightings.heard("cloud-a", cloud.digest, cloud) and sightings.flush() == 1
    assert ledger.machine_of("cloud-a") == "aws:i-0abc"
    cloud_b = HostHardware("ec2ffff-9999", (B,))
    sightings.heard("cloud-b", cloud_b.digest, cloud_b)
    sightings.flush()
    assert ledger.machine_of("cloud-b") == "dmi:ec2ffff-9999"
    ledger.observe_machine("cloud-b", "aws:i-0bbb", T0)  # the intake's, one cycle later
    assert ledger.machine_of("cloud-b") == "aws:i-0bbb"
    ledger.observe_machine("metal-a", "metal3:ns:host-1:m-0", T0)
    sightings.heard("metal-a", HOST.digest, HOST)
    sightings.flush()
    assert ledger.machine_of("metal-a") == "dmi:SN-0001"
    ledger.observe_machine("metal-a", "metal3:ns:host-1:m-0", T0)
    assert ledger.machine_of("metal-a") == "dmi:SN-0001"


def test_a_repeated_heartbeat_writes_nothing_and_a_flush_writes_once(engine: Engine) -> None:
    clock = FakeClock(T0)
    writes = Writes(engine)
    ledger, sightings = replica(engine, clock)
    assert sightings.heard("gpu-a1", HOST.digest, None)  # not held yet: asked whole
    assert not sightings.heard("gpu-a1", HOST.digest, HOST)
    for _ in range(50):  # the heartbeats after: the digest only, memory only
        assert not sightings.heard("gpu-a1", HOST.digest, None)
    assert writes.statements == [] and sightings.pending() == 1
    assert sightings.flush() == 1
    first = len(writes.statements)
    assert first > 0
    life = ledger.machine("dmi:SN-0001")
    assert life is not None and life.dmi_serial == "SN-0001" and life.node == "gpu-a1"
    assert [(p.gpu_uuid, p.node, p.machine_id) for p in life.placements] == [
        (A.uuid, "gpu-a1", "dmi:SN-0001"),
        (B.uuid, "gpu-a1", "dmi:SN-0001"),
    ]
    assert [(link.subject, link.node) for link in life.links] == [(PLACED, "gpu-a1")]
    gpu = ledger.gpu(A.uuid)
    assert gpu is not None and gpu.gpu.serial == "1650000000001"
    # Sent whole again (another replica asked), or flushed again: nothing new.
    assert not sightings.heard("gpu-a1", HOST.digest, HOST)
    assert sightings.flush() == 0
    assert len(writes.statements) == first

    # A controller restart: the new replica asks every agent once; what it is told is what the
    # ledger holds, so nothing is written.
    clock.advance(600)
    _, restarted = replica(engine, clock)
    assert restarted.heard("gpu-a1", HOST.digest, None)
    assert not restarted.heard("gpu-a1", HOST.digest, HOST)
    assert restarted.flush() == 1
    assert len(writes.statements) == first


def test_a_machine_under_a_new_name_and_a_new_gpu_are_written_in_one_flush(
    engine: Engine,
) -> None:
    clock = FakeClock(T0)
    ledger, sightings = replica(engine, clock)
    sightings.heard("gpu-a1", HOST.digest, HOST)
    sightings.heard("gpu-b1", "1111111111111111", HostHardware("SN-0002", ()))
    sightings.flush()
    # The first machine reinstalled as gpu-a7 with a third GPU; gpu-b1 unchanged.
    clock.advance(3600)
    c = GpuIdentity("GPU-cccccccc-0000-0000-0000-000000000003", "0000:3b:00", 2)
    moved = HostHardware("SN-0001", (A, B, c))
    writes = Writes(engine)
    assert sightings.heard("gpu-a7", moved.digest, None)
    sightings.heard("gpu-a7", moved.digest, moved)
    sightings.heard("gpu-b1", "1111111111111111", HostHardware("SN-0002", ()))
    assert sightings.flush() == 1
    assert sum(s.startswith("INSERT INTO LEDGER_PLACEMENTS") for s in writes.statements) >= 1
    life = ledger.machine("dmi:SN-0001")
    assert life is not None and life.node == "gpu-a7"
    placed = [(link.node, link.detail) for link in life.links if link.subject == PLACED]
    assert placed == [("gpu-a1", {}), ("gpu-a7", {"was_cluster": "default", "was_node": "gpu-a1"})]
    nodes = sorted((p.gpu_uuid[:12], p.node, p.to_at is None) for p in life.placements)
    assert nodes == [
        ("GPU-aaaaaaaa", "gpu-a1", False),
        ("GPU-aaaaaaaa", "gpu-a7", True),
        ("GPU-bbbbbbbb", "gpu-a1", False),
        ("GPU-bbbbbbbb", "gpu-a7", True),
        ("GPU-cccccccc", "gpu-a7", True),
    ]


def test_a_failed_flush_keeps_what_arrived_for_the_next(engine: Engine) -> None:
    clock = FakeClock(T0)
    ledger, sightings = replica(engine, clock)
    sightings.heard("gpu-a1", HOST.digest, HOST)

    def broken(_sightings: Any) -> list[Any]:
        raise RuntimeError("database gone")

    working = ledger.observe_hosts
    ledger.observe_hosts = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(RuntimeError):
        sightings.flush()
    assert sightings.pending() == 1
    ledger.observe_hosts = working  # type: ignore[method-assign]
    assert sightings.flush() == 1
    assert ledger.machine("dmi:SN-0001") is not None


def test_a_fleets_first_wave_is_written_a_batch_per_flush(engine: Engine) -> None:
    """Every agent's identity at once (a fleet's first heartbeats) is not one transaction: each
    flush hands the ledger `FLUSH_BATCH` nodes, the rest the flushes after, none lost."""
    clock = FakeClock(T0)
    ledger, sightings = replica(engine, clock)
    total = FLUSH_BATCH * 2 + 7
    for i in range(total):
        host = HostHardware(f"SN-{i:05d}")
        sightings.heard(f"gpu-{i:05d}", host.digest, host)
    assert [sightings.flush() for _ in range(4)] == [FLUSH_BATCH, FLUSH_BATCH, 7, 0]
    assert sightings.pending() == 0
    assert ledger.machine_of(f"gpu-{total - 1:05d}") == f"dmi:SN-{total - 1:05d}"


def holds_on(ledger: Ledger, engine: Engine, clock: FakeClock, kube: StubKube) -> MachineHolds:
    return MachineHolds(
        ledger,
        cast(KubeClient, kube),
        Repository(db.make_session_factory(engine), "default", clock),
        clock,
        settings=lambda: MachineHoldSettings(count=2),
        provider_kind=lambda _pool: "http",
        actor="test",
    )


def node(name: str) -> Node:
    """A bare-metal node whose providerID names no hardware (a static name)."""
    return Node(name=name, uid=f"u-{name}", resource_version="1", provider_id=f"static://{name}")


def test_a_held_serial_in_a_heartbeat_to_any_replica_fences_its_new_node(engine: Engine) -> None:
    clock = FakeClock(T0)
    leader, _ = replica(engine, clock)
    # The machine was held under its old name (its agent's XIDs named the serial then).
    leader.observe_machine("gpu-old-7", "dmi:SN-0001", T0, dmi_serial="SN-0001")
    assert leader.quarantine("dmi:SN-0001", "replaced 3 times within 30 days", T0)
    kube = StubKube({n.name: n for n in (node("gpu-new-1"), node("gpu-b1"), node("gpu-old-7"))})
    holds = holds_on(leader, engine, clock, kube)
    # The old name is gone from the cluster; nothing names the new one's hardware yet.
    del kube.nodes["gpu-old-7"]
    assert holds.fence_arrivals(list(kube.nodes.values())) == []

    # Reinstalled as gpu-new-1, its agent's first heartbeat reaches the other replica; a
    # machine that is not held reports as gpu-b1.
    clock.advance(60)
    _, other = replica(engine, clock)
    other.heard("gpu-new-1", HOST.digest, HOST)
    other.heard("gpu-b1", "2222222222222222", HostHardware("SN-0002", ()))
    other.flush()
    assert holds.fence_arrivals(list(kube.nodes.values())) == ["gpu-new-1"]
    fenced = kube.nodes["gpu-new-1"]
    assert fenced.unschedulable and fenced.has_taint(QUARANTINE_TAINT)
    assert not kube.nodes["gpu-b1"].unschedulable
    life = leader.machine("dmi:SN-0001")
    assert life is not None
    assert [link.node for link in life.links if link.subject == HOLD and link.kind == FENCED] == [
        "gpu-new-1"
    ]


def test_a_name_the_held_machine_left_is_not_fenced_for_it(engine: Engine) -> None:
    """The leader's picture still has the held machine under gpu-a1, but another replica has
    since been told gpu-a1 is other hardware: the database's latest word wins."""
    clock = FakeClock(T0)
    leader, mine = replica(engine, clock)
    mine.heard("gpu-a1", HOST.digest, HOST)
    mine.flush()
    assert leader.quarantine("dmi:SN-0001", "failed validation twice", T0)
    clock.advance(60)
    _, other = replica(engine, clock)
    other.heard("gpu-a1", "3333333333333333", HostHardware("SN-0003", ()))
    other.flush()
    kube = StubKube({"gpu-a1": node("gpu-a1")})
    assert leader.machine_of("gpu-a1") == "dmi:SN-0001"  # this replica's stale picture
    assert holds_on(leader, engine, clock, kube).fence_arrivals(list(kube.nodes.values())) == []
