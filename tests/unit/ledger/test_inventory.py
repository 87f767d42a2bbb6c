"""A GPU's board serial, VBIOS and driver in the ledger (#39): from the agent's heartbeat and from
a validation's nvidia-smi inventory, also for a GPU the ledger already placed (a driver upgrade,
an agent without nvidia-smi); written only when a value changed, so a repeated report, or a
restarted replica's, writes nothing."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import Engine, event

from remediator.actions import burnin
from remediator.actions.inventory import Inventory
from remediator.clock import FakeClock
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.ledger.identity import GpuIdentity, HostHardware, pci
from remediator.ledger.sightings import HardwareSightings
from remediator.ledger.store import Ledger
from remediator.policy.schema import MachineHoldSettings
from remediator.remediation.machine_hold import MachineHolds
from remediator.remediation.service import TransitionSeen
from remediator.sim.node import ibstat, smi
from remediator.sim.node.hardware import DEFAULT_MODEL, build_profile
from remediator.store import db
from remediator.store.records import NewRemediation
from remediator.store.repository import Repository
from tests.unit.ledger.test_machine_hold import StubKube

T0 = datetime(2026, 11, 1, tzinfo=UTC)
A = GpuIdentity("GPU-aaaaaaaa-0000-0000-0000-000000000001", "0000:18:00", 0, "1650000000001")
B = GpuIdentity("GPU-bbbbbbbb-0000-0000-0000-000000000002", "0000:2a:00", 1, model="H100")


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


def host(driver: str | None, vbios: str | None = None) -> HostHardware:
    return HostHardware(
        "SN-0001",
        tuple(dataclasses.replace(g, driver=driver, vbios=vbios) for g in (A, B)),
    )


def facts(ledger: Ledger, uuid: str) -> tuple[str | None, ...]:
    life = ledger.gpu(uuid)
    assert life is not None
    return (life.gpu.serial, life.gpu.model, life.gpu.vbios, life.gpu.driver)


def test_a_driver_upgrade_in_a_heartbeat_reaches_a_placed_gpu_and_only_once(
    engine: Engine,
) -> None:
    clock = FakeClock(T0)
    factory = db.make_session_factory(engine)
    ledger = Ledger(factory, "default", clock)
    sightings = HardwareSightings(ledger, clock)
    before = host(None)
    sightings.heard("gpu-a1", before.digest, before)
    sightings.flush()
    assert facts(ledger, A.uuid) == ("1650000000001", None, None, None)

    # The node's driver was upgraded and nvidia-smi now runs: same GPUs in the same slots.
    clock.advance(600)
    upgraded = host("550.127.08", "96.00.74.00.01")
    assert upgraded.digest != before.digest
    sightings.heard("gpu-a1", upgraded.digest, upgraded)
    assert sightings.flush() == 1
    assert facts(ledger, A.uuid) == ("1650000000001", None, "96.00.74.00.01", "550.127.08")
    assert facts(ledger, B.uuid) == (None, "H100", "96.00.74.00.01", "550.127.08")
    life = ledger.gpu(A.uuid)
    assert life is not None and len(life.placements) == 1  # a fact, not a move

    # The same report again, and a restarted replica asking every agent once: nothing written.
    writes = Writes(engine)
    sightings.heard("gpu-a1", "0" * 16, upgraded)
    sightings.flush()
    restarted = HardwareSightings(Ledger(factory, "default", clock), clock)
    restarted.heard("gpu-a1", upgraded.digest, upgraded)
    assert restarted.flush() == 1
    assert writes.statements == []


def test_a_validations_inventory_gives_the_gpus_serial_vbios_and_driver(engine: Engine) -> None:
    """The validate step's inventory verdict, judged from the simulator's nvidia-smi and ibstat
    output by the real parsers, as the step records it on its `validate_done` line."""
    clock = FakeClock(T0)
    factory = db.make_session_factory(engine)
    repo, ledger = Repository(factory, "default", clock), Ledger(factory, "default", clock)
    name = "gpu-v1"
    profile = build_profile(name, "uid-v1", 0, DEFAULT_MODEL, 2)
    gpu = profile.gpu(1)
    # The agent (without nvidia-smi on its PATH) placed the GPUs: UUID, slot, index only.
    ledger.observe_machine(name, "aws:i-0v1", T0)
    ledger.observe_gpus(name, [GpuIdentity(gpu.uuid, pci(gpu.pci_bus_id), 1)], T0)

    outputs = {
        "gpus": smi.query(
            burnin.programs(burnin.INVENTORY, dcgm_level=2, gpus=2)["gpus"], profile, [0, 1]
        ).output,
        "smi": smi.table(profile, [0, 1]).output,
        "ib": ibstat.run(["ibstat"], profile, ()).output,
    }
    inventory = burnin.read_inventory(outputs)
    assert isinstance(inventory, Inventory)
    verdict = burnin.inventory_verdict(inventory, None)
    assert verdict.passed, verdict.reason
    detail = {"node": name, "checks": [verdict.to_json()], "inventory": inventory.summary}

    record = repo.create(
        NewRemediation(
            node=name,
            policy="xid-74",
            reason="XID 74",
            signals=[],
            ladder=[{"action": "reboot"}, {"action": "validate"}],
            pool="gpu",
            signal_kind="xid",
        ),
        actor="test",
    )
    node = Node(name=name, uid="u1", resource_version="1", provider_id="aws:///zone-a/i-0v1")
    holds = MachineHolds(
        ledger,
        cast(KubeClient, StubKube({name: node})),
        repo,
        clock,
        settings=lambda: MachineHoldSettings(count=3),
        provider_kind=lambda _pool: "aws",
        actor="test",
    )
    clock.advance(60)
    holds.on_transition(TransitionSeen(record, record, 1.0, "validate_done", detail))

    assert facts(ledger, gpu.uuid) == (
        gpu.serial,
        profile.model,
        profile.vbios_version,
        profile.driver_version,
    )
    other = profile.gpu(0)  # not met before: placed by the inventory, on the node's machine
    life = ledger.gpu(other.uuid)
    assert life is not None and life.gpu.driver == profile.driver_version
    assert [(p.node, p.machine_id, p.gpu_index) for p in life.placements] == [
        (name, "aws:i-0v1", 0)
    ]
