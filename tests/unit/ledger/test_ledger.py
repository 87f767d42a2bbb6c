"""The ledger over a migrated SQLite: placements follow a GPU across node names and machines,
a swapped card is a conflict (not merged), a signal without a UUID is linked by node + PCI
address + time, and the questions policies and pages ask."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from remediator.clock import FakeClock
from remediator.ledger.identity import GpuIdentity, HostHardware
from remediator.ledger.store import Ledger, _key, _name, _NodePicture
from remediator.signals.model import Signal, SignalKind
from remediator.store import db

T0 = datetime(2026, 11, 1, tzinfo=UTC)
A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


@pytest.fixture
def engine(sqlite_head_template: Path, tmp_path: Path) -> Iterator[Engine]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    built = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    yield built
    built.dispose()


def ledger_on(engine: Engine, cluster: str = "c1") -> Ledger:
    return Ledger(db.make_session_factory(engine), cluster, FakeClock(T0))


def xid(node: str, at: datetime, *, uuid: str | None = None, pci: str | None = None) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind.XID,
        source="agent",
        observed_at=at,
        code=79,
        gpu_uuid=uuid,
        labels={"pci": pci} if pci else {},
    )


def test_a_gpu_followed_to_another_node_keeps_its_history(engine: Engine) -> None:
    ledger = ledger_on(engine)
    ledger.observe_machine("gpu-a1", "dmi:SN1", T0)
    ledger.observe_gpus("gpu-a1", [GpuIdentity(A, "00000000:18:00.0", 0, model="H100")], T0)
    ledger.link_signals([xid("gpu-a1", T0, uuid=A)])
    later = T0 + timedelta(days=2)
    # Repaired and back under a new name: same board, same GPU.
    ledger.observe_machine("gpu-a9", "dmi:SN1", later)
    ledger.observe_gpus("gpu-a9", [GpuIdentity(A, "0000:18:00.0", 0)], later)
    life = ledger.gpu(A)
    assert life is not None
    assert [(p.node, p.machine_id, p.to_at) for p in life.placements] == [
        ("gpu-a1", "dmi:SN1", later),
        ("gpu-a9", "dmi:SN1", None),
    ]
    assert life.faults_by_xid == {79: 1}
    assert life.gpu.model == "H100"
    machine = ledger.machine("dmi:SN1")
    assert machine is not None and machine.node == "gpu-a9"


def test_a_second_uuid_at_one_pci_address_is_flagged_not_merged(engine: Engine) -> None:
    ledger = ledger_on(engine)
    ledger.observe_machine("gpu-a1", "dmi:SN1", T0)
    ledger.observe_gpus("gpu-a1", [GpuIdentity(A, "0000:18:00.0", 0)], T0)
    conflicts = ledger.observe_gpus(
        "gpu-a1", [GpuIdentity(B, "0000:18:00.0", 0)], T0 + timedelta(hours=1)
    )
    assert [(c.pci_bus_id, c.known_uuid, c.seen_uuid) for c in conflicts] == [("0000:18:00", A, B)]
    a, b = ledger.gpu(A), ledger.gpu(B)
    assert a is not None and b is not None
    assert a.placements[-1].to_at == T0 + timedelta(hours=1)
    assert b.placements[-1].to_at is None
    assert len(b.conflicts) == 1


def test_new_hardware_under_the_same_name_is_not_a_swapped_card(engine: Engine) -> None:
    """A GCE instance recreated under its name: a new machine, its GPUs new, no conflict."""
    ledger = ledger_on(engine)
    ledger.observe_machine("gke-a1", "gce:111", T0)
    ledger.observe_gpus("gke-a1", [GpuIdentity(A, "0000:18:00.0", 0)], T0)
    later = T0 + timedelta(hours=3)
    ledger.observe_machine("gke-a1", "gce:222", later)
    assert ledger.observe_gpus("gke-a1", [GpuIdentity(B, "0000:18:00.0", 0)], later) == []
    a = ledger.gpu(A)
    assert a is not None and a.placements[-1].to_at == later


def test_a_signal_without_uuid_is_linked_by_node_pci_and_time(engine: Engine) -> None:
    ledger = ledger_on(engine)
    ledger.observe_gpus("gpu-a1", [GpuIdentity(A, "0000:18:00.0", 0)], T0)
    swap = T0 + timedelta(hours=1)
    ledger.observe_gpus("gpu-a1", [GpuIdentity(B, "0000:18:00.0", 0)], swap)
    # A fresh controller (no picture in memory) resolves from the table.
    fresh = ledger_on(engine)
    now, late = fresh.resolve(
        [
            xid("gpu-a1", swap + timedelta(minutes=5), pci="PCI:0000:18:00"),
            xid("gpu-a1", T0 + timedelta(minutes=5), pci="0000:18:00"),
        ]
    )
    assert (now.gpu_uuid, late.gpu_uuid) == (B, A)
    (unknown,) = fresh.resolve([xid("gpu-a1", swap, pci="0000:3b:00")])
    assert unknown.gpu_uuid is None


def test_signals_carrying_a_uuid_teach_the_placement(engine: Engine) -> None:
    ledger = ledger_on(engine)
    dcgm = Signal(
        node="gpu-a1",
        kind=SignalKind.XID,
        source="prometheus",
        observed_at=T0,
        code=48,
        gpu=3,
        gpu_uuid=A,
        labels={"pci_bus_id": "00000000:3B:00.0", "modelName": "NVIDIA H100 80GB HBM3"},
    )
    ledger.resolve([dcgm])
    assert ledger.gpu_at("gpu-a1", "0000:3b:00", None, T0) == A
    (summary,) = ledger.gpus(model="NVIDIA H100 80GB HBM3", cluster="c1")
    assert summary.uuid == A
    assert ledger.gpus(cluster="other") == []


def test_remediations_by_gpu_and_machine_and_quarantine(engine: Engine) -> None:
    ledger = ledger_on(engine)
    ledger.observe_machine("gpu-a1", "aws:i-1", T0)
    ledger.link_remediation(7, "gpu-a1", [xid("gpu-a1", T0, uuid=A)], T0, {"policy": "p"})
    ledger.link_remediation(8, "gpu-a1", [xid("gpu-a1", T0)], T0, {"policy": "p"})
    since = T0 - timedelta(days=1)
    assert [link.ref_id for link in ledger.remediations_of(since, gpus=[A])] == [7]
    assert [link.ref_id for link in ledger.remediations_of(since, machines=["aws:i-1"])] == [7, 8]
    assert ledger.remediations_of(T0, gpus=[A]) == []
    assert ledger.quarantine("aws:i-1", "replaced 3 times", T0)
    assert not ledger.quarantine("aws:i-1", "again", T0)
    assert ledger.quarantined("aws:i-1")


def test_a_nodes_picture_keeps_one_entry_per_address_and_per_index() -> None:
    """As two dicts keyed by PCI address and by index would: a later GPU takes the key from an
    earlier one, which keeps only the other; an entry named by neither is gone."""
    first, second = _NodePicture("dmi:SN1"), _NodePicture("dmi:SN2")
    first.put(A, "0000:18:00", 0, T0)
    first.put(B, "0000:18:00", 1, T0 + timedelta(hours=1))
    assert (first.by_pci("0000:18:00"), first.by_index(0), first.by_index(1)) == (1, 0, 1)
    assert first.uuids[first.find("0000:18:00", 0) or 0] == B  # the address before the index
    assert first.uuids[first.find(None, 0) or 0] == A
    assert (first.when(0), first.when(1)) == (T0, T0 + timedelta(hours=1))
    first.drop(B)
    assert (first.by_pci("0000:18:00"), first.find(None, 0)) == (None, 0)
    first.put(B, None, 0, T0)  # takes index 0 from A, which is then named by nothing
    assert first.uuids == (B,) and first.pcis == (None,)
    first.put("GPU-neither", None, None, T0)
    assert first.uuids == (B,)
    # Nodes of one hardware layout hold one tuple of addresses and one of indexes between them.
    second.put(A, None, 0, T0)
    assert second.pcis is first.pcis and second.indexes is first.indexes
    second.put(B, None, 1, T0)
    assert second.since == T0 and second.when(1) == T0  # one time for entries that share it
    first.clear()
    assert first.find("0000:18:00", 0) is None and first.machine == "dmi:SN1"


def test_a_gpu_reported_by_two_nodes_in_one_batch_sits_on_the_second(engine: Engine) -> None:
    """More nodes than one write batch, and one GPU named twice in it: its first placement is
    closed by the second (the rows pending are written before the close), one GPU row kept
    with the newest sighting."""
    ledger = ledger_on(engine)
    later = T0 + timedelta(minutes=1)
    fleet = {
        f"gpu-{n:03d}": (
            [
                GpuIdentity(f"GPU-{n:08d}-0000-0000-0000-{i:012d}", f"0000:{16 + i:02x}:00", i)
                for i in range(8)
            ],
            T0,
        )
        for n in range(80)
    }
    fleet["gpu-999"] = (
        [GpuIdentity("GPU-00000003-0000-0000-0000-000000000005", "0000:18:00", 0, model="H100")],
        later,
    )
    assert ledger.observe_many(fleet) == []
    life = ledger.gpu("GPU-00000003-0000-0000-0000-000000000005")
    assert life is not None
    assert [(p.node, p.to_at) for p in life.placements] == [("gpu-003", later), ("gpu-999", None)]
    assert (life.gpu.first_seen_at, life.gpu.last_seen_at, life.gpu.model) == (T0, later, "H100")
    assert ledger.gpu_at("gpu-003", "0000:15:00", None, later) is None
    assert ledger.gpu_at("gpu-999", "0000:18:00", None, later) == life.gpu.uuid
    assert len(ledger.gpus(cluster="c1", limit=1000)) == 80 * 8
    fresh = ledger_on(engine)  # a restarted controller's picture, from the table
    assert fresh.gpu_at("gpu-003", "0000:15:00", None, later) is None
    assert (
        fresh.gpu_at("gpu-079", "0000:17:00", 7, later)
        == "GPU-00000079-0000-0000-0000-000000000007"
    )


def test_a_restarted_ledger_keeps_what_it_learns_of_a_new_node(engine: Engine) -> None:
    """The picture loaded from the table at the first sighting, then the new node's machine and
    GPU placed in it beside the nodes loaded."""
    first = ledger_on(engine)
    first.observe_machine("gpu-a1", "dmi:SN1", T0)
    first.observe_gpus("gpu-a1", [GpuIdentity(A, "0000:18:00", 0)], T0)
    fresh = ledger_on(engine)
    host = HostHardware("SN2", (GpuIdentity(B, "0000:18:00", 0),))
    assert fresh.observe_hosts({"gpu-a2": (host, T0)}) == []
    assert (fresh.machine_of("gpu-a1"), fresh.machine_of("gpu-a2")) == ("dmi:SN1", "dmi:SN2")
    assert fresh.gpu_at("gpu-a1", "0000:18:00", None, T0) == A
    assert fresh.gpu_at("gpu-a2", "0000:18:00", None, T0) == B
    assert fresh.observe_hosts({"gpu-a2": (host, T0 + timedelta(minutes=1))}) == []
    machine = fresh.machine("dmi:SN2")
    assert machine is not None and [p.to_at for p in machine.placements] == [None]


def test_a_gpu_uuid_is_kept_as_an_int_only_when_it_spells_back_the_same() -> None:
    assert _key(A) == 0xAAAAAAAA000000000000000000000001 and _name(_key(A)) == A
    for other in (A.upper(), "GPU-1", "MIG-aaaaaaaa-0000-0000-0000-000000000001", A + "0"):
        assert _key(other) == other and _name(other) == other
    assert (
        _key("GPU-aaaaaaaa-0000-0000-0000-00000000000_")
        == "GPU-aaaaaaaa-0000-0000-0000-00000000000_"
    )
    assert (
        _key("GPU-aaaaaaaa_0000_0000_0000-000000000001")
        == "GPU-aaaaaaaa_0000_0000_0000-000000000001"
    )
