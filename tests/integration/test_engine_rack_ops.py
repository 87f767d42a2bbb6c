"""A domain remediation repairs or replaces its rack as a rack, through the node-pool provider:
on `sim serve --topology nvl72 --racks 2` a fatal SXid fences rack 0, every tray of it is
drained, the rack is replaced (or repaired) in ONE provider operation, followed across a restart
of the controller without a second request, and its 18 trays are validated and returned to
service together; rack 1 is never touched. With `validate` in the ladder every tray of the rack
runs its own validation Job, side by side: one tray whose NVLink is slow fails the repaired
rack's validation, the rack stays fenced and goes on to its replacement, whose 18 new trays
take no work before each has passed (across a restart of the controller mid-validation, without
a second Job)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.model.states import State
from remediator.remediation.steps.domain import RACK_REQUESTED
from remediator.signals.model import Signal, SignalKind
from tests.fixtures.sim import FAST_PROGRAMS, start_sim
from tests.integration.engine_support import Engine, start_engine

pytestmark = pytest.mark.integration

WAIT = 180.0  # generous: the simulator's controllers and the engine on a loaded machine
RACK0 = [f"nvl-r0-t{t:02d}" for t in range(18)]
RACK1 = [f"nvl-r1-t{t:02d}" for t in range(18)]

POLICY = """
policies:
  - name: nvswitch-fatal
    description: A fatal NVSwitch error degrades the whole NVLink domain.
    why: Every tray of the rack shares the switch fabric; the rack is mended as one.
    match: {{kind: sxid, labels: {{fatal: "true"}}}}
    scope: domain
    priority: 100
    actions:
      - action: cordon
      - action: drain
        grace: 2s
        timeout: 1m
        on_timeout: force
{steps}
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


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {WAIT:.0f}s: {what}"
        time.sleep(0.5)


def identities(engine: Engine, names: list[str]) -> dict[str, tuple[str, str]]:
    """(uid, boot id) of each node."""
    out: dict[str, tuple[str, str]] = {}
    for name in names:
        node = engine.node(name)
        assert node is not None, name
        out[name] = (node["metadata"]["uid"], node["status"]["nodeInfo"]["bootID"])
    return out


def rack_requests(engine: Engine, node: str) -> list[dict[str, Any]]:
    record = engine.of_node(node)
    if record is None:
        return []
    return [dict(e.detail) for e in record.events if e.action == RACK_REQUESTED]


def run_rack(tmp_path: Path, database_url: str, steps: tuple[str, ...], action: str) -> None:
    sim = start_sim(
        tmp_path / "sim", rbac=False, extra_args=("--topology", "nvl72", "--racks", "2")
    )
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "sxid.yaml").write_text(
        POLICY.format(steps="".join(f"      - action: {a}\n" for a in steps))
    )
    engine = start_engine(sim, database_url, policies)
    try:
        before0, before1 = identities(engine, RACK0), identities(engine, RACK1)
        engine.push(*(sxid(node) for node in RACK0))
        # The controller stops once the operation is asked for, and a new one takes over.
        wait_for("the rack operation requested", lambda: rack_requests(engine, RACK0[0]))
        engine.close()
        engine = start_engine(sim, database_url, policies)
        record = engine.wait_state(RACK0[0], State.SUCCEEDED, timeout=WAIT)

        (requested,) = rack_requests(engine, RACK0[0])
        assert (requested["rack"], requested["action"]) == ("rack-0", action)
        assert sorted(requested["trays"]) == RACK0
        operations = {e.detail["operation_id"] for e in record.events if "operation_id" in e.detail}
        assert operations == {requested["operation_id"]}
        op = httpx.get(f"{sim.nodepool_url}/v1/operations/{requested['operation_id']}").json()
        assert (op["rack"], op["action"], op["state"]) == ("rack-0", action, "succeeded")

        after0 = identities(engine, RACK0)
        for name in RACK0:
            node = engine.node(name)
            assert node is not None and not node["spec"].get("unschedulable"), name
            # Every tray came back: a new machine (replace) or a new boot (repair).
            changed = 0 if action == "replace" else 1
            assert after0[name][changed] != before0[name][changed], name
        assert identities(engine, RACK1) == before1
        assert [r.node for r in engine.remediations()] == [RACK0[0]]
    finally:
        engine.close()
        sim.stop()


def test_a_fatal_sxid_replaces_rack_0_as_a_rack_in_one_operation(
    migrated_database_url: str, tmp_path: Path
) -> None:
    run_rack(tmp_path, migrated_database_url, ("replace",), "replace")


def test_a_domain_reboot_is_the_racks_repair(migrated_database_url: str, tmp_path: Path) -> None:
    run_rack(tmp_path, migrated_database_url, ("reboot", "diagnose", "uncordon"), "repair")


GB200 = "NVIDIA GB200"
# New machines register with it (kubelet --register-with-taints) and only a passed validation
# removes it: without it a new tray is schedulable between joining and the controller's next look.
STARTUP_TAINT = "remediator.io/unvalidated=true:NoSchedule"
VALIDATED = (
    POLICY.replace("priority: 100", "priority: 100\n    on_failure: replace")
    + f"""\
      - action: reboot
      - action: validate
        dcgm_level: 1
        dcgm_level_new: 1
        busbw_floor: {{{{"{GB200}": 600}}}}
      - action: uncordon
"""
)


class Schedulable:
    """Samples rack 0 while the test runs: when each tray was seen Ready and unfenced."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.seen: list[tuple[datetime, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            now = datetime.now(UTC)
            try:
                nodes = self._engine.controller.kube.list_nodes("remediator.io/rack=rack-0")
            except Exception:  # a missed sample only weakens the check
                continue
            for node in nodes:
                fenced = node.unschedulable or any(
                    t.key.startswith("remediator.io/") for t in node.taints
                )
                if node.name in RACK0 and node.ready and not fenced:
                    self.seen.append((now, node.name))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_a_tray_failing_validation_keeps_the_rack_fenced_until_every_new_tray_passed(
    migrated_database_url: str, tmp_path: Path
) -> None:
    sim = start_sim(
        tmp_path / "sim",
        rbac=False,
        program_time_scale=FAST_PROGRAMS,
        extra_args=("--topology", "nvl72", "--racks", "2"),
        startup_taint=STARTUP_TAINT,
    )
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "sxid.yaml").write_text(VALIDATED.format(steps=""))
    (policies / "settings.yaml").write_text(f"startup_taint: {STARTUP_TAINT}\n")
    engine = start_engine(sim, migrated_database_url, policies)
    slow = RACK0[5]
    watcher: Schedulable | None = None
    try:
        before1 = identities(engine, RACK1)
        engine.fault({"type": "nvlink_slow", "node": slow, "fraction": 0.5})
        engine.push(*(sxid(node) for node in RACK0))
        engine.wait_state(RACK0[0], State.DRAINING, State.REBOOTING, timeout=WAIT)
        watcher = Schedulable(engine)

        def started() -> list[Any]:
            record = engine.of_node(RACK0[0])
            events = record.events if record is not None else ()
            return [e for e in events if e.action == "validation_started"]

        # The controller stops once the trays' Jobs are started, and a new one takes over.
        wait_for("the first validation Jobs started", started)
        engine.close()
        restarted = datetime.now(UTC)
        engine = start_engine(sim, migrated_database_url, policies)
        record = engine.wait_state(
            RACK0[0], State.SUCCEEDED, State.FAILED, State.HELD, timeout=3 * WAIT
        )
        assert record.state is State.SUCCEEDED, (record.error, record.hold_reason)

        requests = rack_requests(engine, RACK0[0])
        assert [r["action"] for r in requests] == ["repair", "replace"]
        # One Job per tray and round, none asked twice across the restart.
        jobs = [e.detail for e in record.events if e.action == "validation_started"]
        names = [j["job"] for j in jobs]
        assert len(names) == len(set(names)) == 2 * len(RACK0), names
        assert sorted(j["node"] for j in jobs) == sorted(RACK0 * 2)
        # The new controller judged Jobs the old one had started.
        begun = {
            e.detail["node"]
            for e in record.events
            if e.action == "validation_started" and e.at < restarted
        }
        assert any(
            e.action == "validation_check" and e.at > restarted and e.detail["node"] in begun
            for e in record.events
        ), "no Job was followed across the restart"

        (failed,) = [e for e in record.events if e.action == "validate_failed"]
        assert failed.detail["node"] == slow and failed.detail["escalated_to"] == "replace"
        assert "1 of 18 trays failed validation" in failed.detail["reason"], failed.detail
        verdicts = {v["node"]: v["passed"] for v in failed.detail["trays"]}
        assert verdicts == {t: t != slow for t in RACK0}
        lines = [e.detail for e in record.events if e.action == "validation_check"]
        assert any(ln["node"] == slow and not ln["passed"] for ln in lines)

        (passed,) = [e for e in record.events if e.action == "validate_done"]
        assert passed.detail["new_machine"] is True
        assert all(v["passed"] for v in passed.detail["trays"])
        assert passed.detail["startup_taint_removed"] == STARTUP_TAINT
        assert sorted(v["node"] for v in passed.detail["trays"]) == RACK0

        # No tray of rack 0 took work between the fence and its whole rack's passed validation.
        assert watcher is not None
        early = [(at, n) for at, n in watcher.seen if at < passed.at]
        assert not early, early[:3]
        for name in RACK0:
            node = engine.node(name)
            assert node is not None and not node["spec"].get("unschedulable"), name
            taints = {t["key"] for t in node["spec"].get("taints") or ()}
            assert "remediator.io/unvalidated" not in taints, name
        assert identities(engine, RACK1) == before1
        assert [r.node for r in engine.remediations()] == [RACK0[0]]
    finally:
        if watcher is not None:
            watcher.stop()
        engine.close()
        sim.stop()
