"""Issue 29's done-when through the real `remediator run` on `sim serve --topology nvl72 --racks
2`, signals pushed to its API as the agent would and faults injected into the simulator:

- an XID 79 on one tray gives every pod of its clique's gang one notice, fences and drains that
  tray only, and replaces it from the rack's spare;
- a fatal SXid on every tray of rack 0 fences its 18 trays in one remediation, none of rack 1;
- rack 1 losing power (18 trays NotReady together) trips no storm breaker and opens one domain
  remediation;
- the rack view's API shows both racks' open remediations."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.model.states import State
from tests.fixtures.sim import SimHandle, start_sim
from tests.integration.engine_support import OPERATOR_HEADERS, ProcessRun, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(900)]

WAIT = 180.0
TRAY = "nvl-r0-t03"
GANG = "gang-r0-c0"
RACK0 = [f"nvl-r0-t{t:02d}" for t in range(18)]
RACK1 = [f"nvl-r1-t{t:02d}" for t in range(18)]

POLICIES = {
    "xid.yaml": """
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: A GPU off the bus is dead to every job on the node.
    match: {kind: xid, codes: [79]}
    priority: 100
    actions:
      - action: cordon
      - action: checkpoint
        min_grace: 1s
        max_grace: 20s
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
""",
    "sxid.yaml": """
policies:
  - name: nvswitch-fatal
    description: A fatal NVSwitch error degrades the whole NVLink domain.
    why: Every tray of the rack shares the switch fabric; fence them together.
    match: {kind: sxid, labels: {fatal: "true"}}
    scope: domain
    priority: 100
    actions: [{action: notify}, {action: cordon}]
""",
    "rack.yaml": """
policies:
  - name: rack-down
    description: Trays of an NVLink domain gone NotReady.
    why: A rack that loses power is one fault of its domain, not a storm of tray faults.
    match: {kind: node_condition, labels: {type: Ready}, threshold: {for: 20s}}
    scope: domain
    actions: [{action: notify}, {action: cordon}]
""",
    # The shipped breaker (3 new faults within 5m trip it: 18 trays would); two domains may be
    # out at once so that both racks' remediations run side by side.
    "settings.yaml": """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 50
max_domains_out: 2
storm_breaker: {enabled: true, max_new_faults: {count: 20, percent: 10, min: 3}, window: 5m}
default_cooldown: 1h
""",
}


@pytest.fixture
def run(tmp_path: Path, migrated_database_url: str) -> Iterator[ProcessRun]:
    sim = start_sim(
        tmp_path / "sim", rbac=False, extra_args=("--topology", "nvl72", "--racks", "2")
    )
    try:
        started = ProcessRun(sim, tmp_path / "run", migrated_database_url, policies=POLICIES)
    except BaseException:
        sim.stop()
        raise
    yield started
    started.close()
    sim.stop()


def push(run: ProcessRun, signals: list[dict[str, Any]]) -> None:
    url = f"{run.controller.web_url}/api/v1/signals"
    answer = httpx.post(url, json=signals, headers=OPERATOR_HEADERS, timeout=30)
    assert answer.status_code == 202, answer.text


def sxid(node: str) -> dict[str, Any]:
    return {
        "node": node,
        "kind": "sxid",
        "source": "agent",
        "observed_at": datetime.now(UTC).isoformat(),
        "code": 22003,
        "labels": {"fatal": "true", "switch": "3"},
    }


def gang_nodes(sim: SimHandle) -> set[str] | None:
    out = sim.kubectl(
        "get", "pods", "-n", "training", "-l", f"remediator.io/gang={GANG}", "-o", "json"
    )
    pods = [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]
    if len(pods) != 16 or any(p["status"].get("phase") != "Running" for p in pods):
        return None
    return {p["spec"]["nodeName"] for p in pods}


def fenced(run: ProcessRun, name: str) -> bool:
    node = run.node(name)
    return bool(node and node["spec"].get("unschedulable"))


def test_the_done_when_of_rack_scale_remediation(run: ProcessRun) -> None:
    sim = run.sim
    wait_for(lambda: gang_nodes(sim) is not None, WAIT, "the gang running")
    before = gang_nodes(sim)
    assert before == set(RACK0[:16])
    out = sim.kubectl(
        "get", "pods", "-n", "training", "-l", f"remediator.io/gang={GANG}", "-o", "name"
    )
    first = {line.removeprefix("pod/") for line in out.split()}

    # An XID 79 on one tray: one notice per gang pod, that tray alone fenced, the spare taken.
    run.push_xid(TRAY, 79)
    record = run.wait(TRAY, State.SUCCEEDED, timeout=WAIT)
    events = json.loads(
        sim.kubectl(
            "get", "events", "-n", "training", "--field-selector",
            "reason=CheckpointRequested", "-o", "json",
        )
    )["items"]  # fmt: skip
    noticed = [
        e["involvedObject"]["name"] for e in events if e["involvedObject"]["name"].startswith(GANG)
    ]
    assert sorted(noticed) == sorted(first)
    gang = [dict(e.detail)["gang"] for e in record.events if "gang" in e.detail]
    assert gang and gang[0]["decision"] == "spare" and gang[0]["spare"] == "nvl-r0-t16"
    assert [r.node for r in run.records(TRAY)] == [TRAY]
    assert all(run.record(n) is None for n in RACK0 if n != TRAY)
    wait_for(lambda: "nvl-r0-t16" in (gang_nodes(sim) or ()), WAIT, "the gang on the spare")

    # A fatal SXid on rack 0: its 18 trays fenced in one remediation, rack 1 untouched.
    push(run, [sxid(n) for n in RACK0])
    wait_for(lambda: all(fenced(run, n) for n in RACK0), WAIT, "rack 0 fenced")
    assert not any(fenced(run, n) for n in RACK1)
    rack0 = {r.id for n in RACK0 for r in run.records(n) if r.policy == "nvswitch-fatal"}
    assert len(rack0) == 1

    # Rack 1 loses power: 18 trays NotReady together are one fault, one domain remediation.
    answer = httpx.post(f"{sim.inject_url}/v1/faults", json={"type": "rack_power", "rack": 1})
    assert answer.status_code == 200, answer.text
    wait_for(lambda: all(fenced(run, n) for n in RACK1), WAIT, "rack 1 fenced")
    rack1 = {r.id for n in RACK1 for r in run.records(n)}
    assert len(rack1) == 1
    (down,) = [run.repository.get(i) for i in rack1]
    assert down is not None and down.policy == "rack-down"
    status = run.repository.controller_status()
    assert not status.breaker_tripped, status.breaker_reason

    # The rack view shows both racks' remediations.
    listed = httpx.get(
        f"{run.controller.web_url}/api/v1/domains", headers=OPERATOR_HEADERS, timeout=30
    ).json()
    shown = {d["rack"]: {r["id"] for r in d["remediations"]} for d in listed["domains"]}
    assert shown == {"rack-0": rack0, "rack-1": rack1}
