"""Issue 29 end to end on `sim serve --topology nvl72 --racks 2` through the real engine: an
XID 79 on one tray gives every pod of its clique's gang one notice, fences and drains that tray
only, takes the rack's spare tray into service (the gang comes back in its own rack) and sends
the faulty tray to replacement, the decision and its reason on the remediation's timeline."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from remediator.kube.client import KubeClient
from remediator.model.states import State
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.node_conditions import NodeConditionSource
from tests.fixtures.sim import start_sim
from tests.integration.engine_support import Engine, start_engine, write_policies, xid

pytestmark = pytest.mark.integration

WAIT = 180.0  # generous: the simulator's controllers and the engine on a loaded machine
TRAY = "nvl-r0-t03"
GANG = "gang-r0-c0"
RACK0 = [f"nvl-r0-t{t:02d}" for t in range(18)]


@pytest.fixture
def engine(migrated_database_url: str, tmp_path: Path) -> Iterator[Engine]:
    sim = start_sim(
        tmp_path / "sim", rbac=False, extra_args=("--topology", "nvl72", "--racks", "2")
    )
    try:
        policies = write_policies(tmp_path / "policies", drain_grace=20, pool_percent=100)
        handle = start_engine(sim, migrated_database_url, policies)
    except BaseException:
        sim.stop()
        raise
    yield handle
    handle.close()
    sim.stop()


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {WAIT:.0f}s: {what}"
        time.sleep(0.5)


def gang_pods(engine: Engine) -> list[dict[str, Any]]:
    out = engine.sim.kubectl(
        "get", "pods", "-n", "training", "-l", f"remediator.io/gang={GANG}", "-o", "json"
    )
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def running_nodes(engine: Engine) -> set[str] | None:
    pods = gang_pods(engine)
    if len(pods) != 16 or any(p["status"].get("phase") != "Running" for p in pods):
        return None
    return {p["spec"]["nodeName"] for p in pods}


def notices(engine: Engine) -> list[dict[str, Any]]:
    out = engine.sim.kubectl(
        "get",
        "events",
        "-n",
        "training",
        "--field-selector",
        "reason=CheckpointRequested",
        "-o",
        "json",
    )
    return [e for e in json.loads(out)["items"] if e["involvedObject"]["name"].startswith(GANG)]


def test_xid_79_on_a_tray_notifies_the_gang_drains_the_tray_and_takes_the_spare(
    engine: Engine,
) -> None:
    before = wait_for("the gang running on rack 0's 16 trays", lambda: running_nodes(engine))
    assert before == set(RACK0[:16])
    first = {p["metadata"]["name"] for p in gang_pods(engine)}

    engine.push(xid(TRAY))
    record = engine.wait_state(TRAY, State.SUCCEEDED, timeout=WAIT)

    # One notice per pod of the gang, on every tray: one grace for the whole gang.
    noticed = [e["involvedObject"]["name"] for e in notices(engine)]
    assert sorted(noticed) == sorted(first)
    # Every notice names the faulty tray, also on the gang's other trays (issue 39 item 4).
    messages = [e["message"] for e in notices(engine)]
    assert all(m.startswith(f"Node {TRAY}") for m in messages), messages
    assert sum("where this pod's gang also runs" in m for m in messages) == 15
    facts = [dict(e.detail) for e in record.events if "gang" in e.detail]
    assert facts, [(e.action, dict(e.detail)) for e in record.events]
    # The first round noticed the whole gang; later rounds follow the pods still saving.
    gang = facts[0]["gang"]
    assert {f["gang"]["spare"] for f in facts} == {"nvl-r0-t16"}
    assert gang["decision"] == "spare"
    assert gang["pods"] == 16 and gang["trays"] == 16
    assert gang["reason"].startswith("spare tray nvl-r0-t16 of domain ")

    # The spare is in service: no spare label, no spare taint; only the faulty tray was fenced.
    spare = engine.node("nvl-r0-t16")
    assert spare is not None
    assert "remediator.io/spare" not in spare["metadata"]["labels"]
    assert not any(t["key"] == "remediator.io/spare" for t in spare["spec"].get("taints") or [])
    for name in RACK0[:16]:
        node = engine.node(name)
        if name != TRAY and node is not None:
            assert not node["spec"].get("unschedulable"), name
    others = [r for r in engine.remediations() if r.node != TRAY]
    assert others == []

    # The gang is back, whole, in its own rack, on the spare instead of the faulty tray.
    after = wait_for("the gang running again in rack 0", lambda: running_nodes(engine))
    assert after <= set(RACK0) and "nvl-r0-t16" in after and TRAY not in after


def test_with_no_spare_in_the_rack_the_gang_is_released_into_another_domain(
    engine: Engine,
) -> None:
    wait_for("the gang running on rack 0's 16 trays", lambda: running_nodes(engine))
    first = {p["metadata"]["name"] for p in gang_pods(engine)}
    # Room in rack 1 (its own gang gone), none in rack 0: both its spares are out of service.
    engine.sim.kubectl("delete", "job", "-n", "training", "gang-r1-c0", "--wait=false")
    wait_for("rack 1's gang gone", lambda: not other_gang_pods(engine))
    engine.sim.kubectl("cordon", "nvl-r0-t16", "nvl-r0-t17")

    engine.push(xid(TRAY))
    record = engine.wait_state(TRAY, State.SUCCEEDED, timeout=WAIT)

    noticed = [e["involvedObject"]["name"] for e in notices(engine)]
    assert sorted(noticed) == sorted(first)
    facts = [dict(e.detail)["gang"] for e in record.events if "gang" in e.detail]
    assert facts, [(e.action, dict(e.detail)) for e in record.events]
    assert {(f["decision"], f["spare"]) for f in facts} == {("release", None)}
    assert facts[0]["reason"].startswith(
        f"no spare in rack rack-0: gang released (training/{GANG}) to reschedule into another "
        "domain than "
    )
    assert [r.node for r in engine.remediations()] == [TRAY]
    # The gang runs again, whole, in rack 1.
    rack1 = {f"nvl-r1-t{t:02d}" for t in range(16)}
    wait_for("the gang running in rack 1", lambda: running_nodes(engine) == rack1)


def other_gang_pods(engine: Engine) -> list[str]:
    out = engine.sim.kubectl(
        "get", "pods", "-n", "training", "-l", "remediator.io/gang=gang-r1-c0", "-o", "name"
    )
    return out.split()


SXID_POLICY = """
policies:
  - name: nvswitch-fatal
    description: A fatal NVSwitch error degrades the whole NVLink domain.
    why: Every tray of the rack shares the switch fabric; fence them together.
    match: {kind: sxid, labels: {fatal: "true"}}
    scope: domain
    priority: 100
    actions: [{action: notify}, {action: cordon}]
"""


def sxid(node: str) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind.SXID,
        source="push",
        observed_at=datetime.now(UTC),
        code=22003,
        labels={"fatal": "true", "switch": "3"},
    )


def fenced(engine: Engine, name: str) -> bool:
    node = engine.node(name)
    return bool(node and node["spec"].get("unschedulable"))


def test_a_fatal_sxid_on_every_tray_of_rack_0_fences_rack_0_in_one_remediation(
    migrated_database_url: str, tmp_path: Path
) -> None:
    sim = start_sim(
        tmp_path / "sim", rbac=False, extra_args=("--topology", "nvl72", "--racks", "2")
    )
    try:
        policies = tmp_path / "policies"
        policies.mkdir()
        (policies / "sxid.yaml").write_text(SXID_POLICY)
        engine = start_engine(sim, migrated_database_url, policies)
        try:
            # The simulator writes the SXid on every compute tray of the rack: 18 signals.
            engine.push(*(sxid(node) for node in RACK0))
            # The ladder ends at the cordon: the rack stays fenced, held for a human. (Waiting
            # for `quarantined` raced the engine: the fence of 18 trays can pass between polls.)
            held = engine.wait_state(RACK0[0], State.HELD, timeout=WAIT)
            assert "ladder ends after" in (held.hold_reason or "")
            wait_for("every tray of rack 0 fenced", lambda: all(fenced(engine, n) for n in RACK0))
            assert not any(fenced(engine, f"nvl-r1-t{t:02d}") for t in range(18))
            (only,) = engine.remediations()
            record = engine.of_node(RACK0[0])
            assert record is not None and record.id == only.id
            opened = dict(record.events[0].detail)
            assert (opened["scope"], opened["trays"], opened["signals"]) == ("domain", 18, 18)
        finally:
            engine.close()
    finally:
        sim.stop()


RACK_DOWN_POLICY = """
policies:
  - name: rack-down
    description: Trays of an NVLink domain gone NotReady.
    why: A rack that loses power is one fault of its domain, not a storm of tray faults.
    match: {kind: node_condition, labels: {type: Ready}}
    scope: domain
    actions: [{action: notify}, {action: cordon}]
"""


def test_eighteen_trays_of_one_rack_not_ready_trip_no_breaker_and_open_one_remediation(
    migrated_database_url: str, tmp_path: Path
) -> None:
    sim = start_sim(
        tmp_path / "sim", rbac=False, extra_args=("--topology", "nvl72", "--racks", "2")
    )
    kube = KubeClient.from_kubeconfig(sim.kubeconfig, timeout=5.0)
    try:
        policies = tmp_path / "policies"
        policies.mkdir()
        (policies / "rack.yaml").write_text(RACK_DOWN_POLICY)
        # The shipped breaker: 3 new faults (its floor) within 5m trip it; 18 trays would.
        (policies / "settings.yaml").write_text(
            "storm_breaker: {enabled: true, max_new_faults: {count: 20, percent: 10, min: 3}}\n"
        )
        engine = start_engine(
            sim, migrated_database_url, policies, sources=[NodeConditionSource(kube)]
        )
        try:
            engine.fault({"type": "rack_power", "rack": 0})
            wait_for("every tray of rack 0 fenced", lambda: all(fenced(engine, n) for n in RACK0))
            (only,) = engine.remediations()
            assert only.node in RACK0 and only.policy == "rack-down"
            status = engine.repository.controller_status()
            assert not status.breaker_tripped, status.breaker_reason
            assert not any(fenced(engine, f"nvl-r1-t{t:02d}") for t in range(18))
        finally:
            engine.close()
    finally:
        kube.close()
        sim.stop()


RACK1 = [f"nvl-r1-t{t:02d}" for t in range(18)]


def test_a_queued_rack_remediation_fences_every_tray_of_its_rack(
    migrated_database_url: str, tmp_path: Path
) -> None:
    """Issue 39 item 2: rack 1's fatal SXid waits for max_domains_out behind rack 0's, and
    while it waits none of its 18 trays takes new work (the lead tray alone was cordoned); the
    fence owner keeps them fenced (a human's uncordon of one is put back)."""
    sim = start_sim(
        tmp_path / "sim", rbac=False, extra_args=("--topology", "nvl72", "--racks", "2")
    )
    try:
        policies = tmp_path / "policies"
        policies.mkdir()
        (policies / "sxid.yaml").write_text(SXID_POLICY)
        engine = start_engine(sim, migrated_database_url, policies)
        try:
            engine.push(*(sxid(node) for node in RACK0))
            engine.wait_state(RACK0[0], State.HELD, timeout=WAIT)
            engine.push(*(sxid(node) for node in RACK1))
            queued = engine.wait_state(RACK1[0], State.QUEUED, timeout=WAIT)
            assert queued.hold_reason == "max domains out in pool gb200-nvl72 (1)"
            wait_for("every tray of rack 1 fenced", lambda: all(fenced(engine, n) for n in RACK1))
            engine.sim.kubectl("uncordon", "nvl-r1-t05")
            wait_for("nvl-r1-t05 fenced again", lambda: fenced(engine, "nvl-r1-t05"))
            record = engine.of_node(RACK1[0])
            assert record is not None and record.state is State.QUEUED
            cordon = [dict(e.detail) for e in record.events if e.action == "queued_cordon"]
            assert [sorted(c["trays"]) for c in cordon] == [RACK1]
        finally:
            engine.close()
    finally:
        sim.stop()
