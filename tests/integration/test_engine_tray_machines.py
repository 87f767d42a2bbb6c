"""A replaced tray is a new machine (issue #39, item 1): on `sim serve --topology nvl72` the
node-pool API brings a replacement tray back under its slot's name and providerID, with a new
Node object and new hardware. The ledger keeps each tray that sat in the slot apart, so neither
the machine hold ("taken out N times within 30 days") nor the reboot cap counts a fresh tray's
predecessors against it, and a repeat counted by the machine counts the tray in the slot now."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from remediator.ledger.store import REPLACEMENT
from remediator.model.states import State
from remediator.store.records import RemediationRecord
from tests.fixtures.sim import FAST_PROGRAMS, SimHandle, start_sim
from tests.integration.engine_support import Engine, start_engine, xid

pytestmark = pytest.mark.integration

WAIT = 180.0  # generous: the simulator's controllers and the engine on a loaded machine
REPLACED_TRAY = "nvl-r0-t01"
REBOOTED_TRAY = "nvl-r0-t02"
REPEATING_TRAY = "nvl-r0-t03"
DRAIN = """      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
"""
POLICIES = f"""
policies:
  - name: gpu-off-the-bus
    description: The GPU has fallen off the bus.
    why: Only a new tray mends it.
    match: {{kind: xid, codes: [79]}}
    priority: 100
    actions:
{DRAIN}      - action: replace
  - name: double-bit-error
    description: A double-bit ECC error.
    why: A reboot usually clears it; a tray that needs one too often is replaced.
    match: {{kind: xid, codes: [48]}}
    priority: 90
    on_failure: replace
    actions:
{DRAIN}      - action: reboot
        timeout: 2m
        max_reboots: 1
        window: 7d
      - action: diagnose
        level: 1
      - action: uncordon
  - name: tray-fault
    description: An uncorrectable error contained to the application.
    why: A first one is looked at and the tray goes back.
    match: {{kind: xid, codes: [94]}}
    priority: 80
    actions:
{DRAIN}      - action: diagnose
        level: 1
      - action: uncordon
  - name: tray-fault-again
    description: The same tray failed again within the hour.
    why: A tray that keeps failing is hardware, whatever its name.
    match:
      kind: xid
      codes: [94]
      repeat:
        count: 2
        within: 1h
        by: machine
        of: [gpu-off-the-bus, tray-fault, tray-fault-again]
    priority: 85
    actions:
{DRAIN}      - action: diagnose
        level: 1
      - action: uncordon
"""
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 50}
  cluster: {percent: 50}
max_concurrent: 10
storm_breaker: {enabled: true, max_new_faults: 20, window: 5m}
default_cooldown: 1s
machine_hold: {count: 2, within: 30d}
"""
ENDED = (State.SUCCEEDED, State.HELD, State.FAILED)


@dataclass
class Rack:
    sim: SimHandle
    engine: Engine


@pytest.fixture
def rack(migrated_database_url: str, tmp_path: Path) -> Iterator[Rack]:
    sim = start_sim(
        tmp_path / "sim",
        rbac=False,
        program_time_scale=FAST_PROGRAMS,
        extra_args=("--topology", "nvl72", "--racks", "1"),
    )
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "trays.yaml").write_text(POLICIES)
    (policies / "settings.yaml").write_text(SETTINGS)
    engine = start_engine(sim, migrated_database_url, policies)
    yield Rack(sim, engine)
    engine.close()
    sim.stop()


def fault(engine: Engine, node: str, code: int, after: int, gpu: int) -> RemediationRecord:
    """Push an XID on one GPU of the node (another GPU each time: the same fault again within
    the fold window counts once) and wait for the remediation it opens (newer than `after`) to
    end."""
    engine.push(xid(node, code=code, gpu=gpu))
    deadline = time.monotonic() + WAIT
    while True:
        record = engine.of_node(node)
        if record is not None and record.id > after and record.state in ENDED:
            return record
        if time.monotonic() > deadline:
            seen = [(e.action, dict(e.detail)) for e in record.events][-4:] if record else []
            raise AssertionError(
                f"{node}: still {record.state if record else None} after {WAIT:.0f}s: {seen}"
            )
        time.sleep(0.5)


def node_uid(engine: Engine, name: str) -> str:
    found = engine.node(name)
    assert found is not None
    uid: str = found["metadata"]["uid"]
    return uid


def test_each_tray_replaced_in_a_slot_is_its_own_machine(rack: Rack) -> None:
    engine, ledger = rack.engine, rack.engine.controller.ledger
    first_uid = node_uid(engine, REPLACED_TRAY)
    first = fault(engine, REPLACED_TRAY, 79, 0, gpu=0)
    assert first.state is State.SUCCEEDED, first.events[-1]
    second_uid = node_uid(engine, REPLACED_TRAY)
    assert second_uid != first_uid
    second = fault(engine, REPLACED_TRAY, 79, first.id, gpu=1)
    # Two trays each replaced once: no machine was taken out twice, so the third tray, fresh
    # from the provider, is returned to service rather than quarantined.
    assert second.state is State.SUCCEEDED, (second.hold_reason, second.events[-1])
    found = engine.node(REPLACED_TRAY)
    assert found is not None and not found["spec"].get("unschedulable")
    assert node_uid(engine, REPLACED_TRAY) not in (first_uid, second_uid)
    machines = ledger.machines_of_remediations([first.id, second.id])
    assert machines[first.id] != machines[second.id]
    third = ledger.machine_of(REPLACED_TRAY)
    assert third is not None and third not in machines.values()
    taken_out = {machines[first.id]: [first.id], machines[second.id]: [second.id], third: []}
    for machine, by in taken_out.items():
        life = ledger.machine(machine)
        assert life is not None and life.quarantined_at is None, machine
        assert [link.ref_id for link in life.links if link.subject == REPLACEMENT] == by, machine


def test_the_reboot_cap_counts_the_reboots_of_the_tray_in_the_slot_not_of_its_name(
    rack: Rack,
) -> None:
    engine = rack.engine
    rebooted = fault(engine, REBOOTED_TRAY, 48, 0, gpu=0)
    assert (rebooted.state, rebooted.outcome) == (State.SUCCEEDED, "repaired")
    # The cap (one reboot within 7 days) is reached: this tray is replaced.
    capped = fault(engine, REBOOTED_TRAY, 48, rebooted.id, gpu=1)
    assert (capped.state, capped.outcome) == (State.SUCCEEDED, "replaced")
    assert any(e.action == "reboot_failed" for e in capped.events)
    # A fresh tray has never been rebooted: its first double-bit error gets its reboot.
    fresh = fault(engine, REBOOTED_TRAY, 48, capped.id, gpu=2)
    actions = [e.action for e in fresh.events]
    assert (fresh.state, fresh.outcome) == (State.SUCCEEDED, "repaired"), actions
    assert "reboot_requested" in actions and "replace_done" not in actions


def test_a_repeat_by_machine_counts_the_tray_in_the_slot_not_the_one_it_replaced(
    rack: Rack,
) -> None:
    engine, ledger = rack.engine, rack.engine.controller.ledger
    replaced = fault(engine, REPEATING_TRAY, 79, 0, gpu=0)
    assert (replaced.state, replaced.outcome) == (State.SUCCEEDED, "replaced")
    fresh = ledger.machine_of(REPEATING_TRAY)
    assert fresh is not None
    assert fresh != ledger.machines_of_remediations([replaced.id])[replaced.id]
    # The fresh tray's first fault: the XID 79 of the tray it replaced is no repeat of it.
    first = fault(engine, REPEATING_TRAY, 94, replaced.id, gpu=1)
    assert first.policy == "tray-fault", first.reason
    assert not ledger.quarantined(fresh)
    # Its second fault within the hour is.
    again = fault(engine, REPEATING_TRAY, 94, first.id, gpu=2)
    assert again.policy == "tray-fault-again", again.reason
    assert f"remediation #2 of machine {fresh}" in again.reason
    assert ledger.quarantined(fresh)
