"""A domain remediation repairs or replaces its rack as a rack, through the node-pool provider:
on `sim serve --topology nvl72 --racks 2` a fatal SXid fences rack 0, every tray of it is
drained, the rack is replaced (or repaired) in ONE provider operation, followed across a restart
of the controller without a second request, and its 18 trays are validated and returned to
service together; rack 1 is never touched."""

from __future__ import annotations

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
from tests.fixtures.sim import start_sim
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
