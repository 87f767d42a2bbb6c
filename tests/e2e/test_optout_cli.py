"""Audited, expiring opt-outs end to end (issue #27): the real `remediator run`, the real
simulator, the opt-out added with the real `remediator optout add` CLI.

- an opt-out added with a short `--until` holds a faulty node (cordoned, nothing evicted or
  replaced) and then no longer does: the remediation re-checks, says the opt-out expired and
  goes on to replace the node without a human; add and expiry are in the audit;
- a pod's opt-out label (no owner, no expiry) holding a faulty node longer than
  `max_opt_out_hold` is escalated: a note to on-call, an audit entry and a "waiting for you"
  entry on the overview that says so.

On SQLite only: the opt-out book and its expiry are the repository's, which
test_engine_optout_records checks on both databases; this run on PostgreSQL too cost 34 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.model.states import State
from remediator.store.audit import AuditLog, AuditQuery
from remediator.store.db import make_engine, make_session_factory
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import (
    ProcessRun,
    WebhookSink,
    wait_for,
)

# The example is 5 s; 20 s leaves a loaded CI machine time to approve and let the controller
# find the opt-out (a CLI start alone took 10-18 s at load 30) before it expires.
UNTIL = "20s"
pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(600)]

OPERATOR = {"Authorization": "Bearer operator-token"}
LABEL = "remediator.io/disable-auto-replace"
POLICIES = """
policies:
  - name: xid-79-replace
    description: GPU fallen off the bus; a human approves, then drain and replace.
    why: NVIDIA XID catalog, XID 79 - the node needs a reboot or replacement.
    match: {kind: xid, codes: [79]}
    priority: 100
    approval: required
    actions:
      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
      - action: replace
  - name: xid-48-replace
    description: Double-bit ECC; drain and replace.
    why: NVIDIA XID catalog, XID 48 - a double-bit ECC error is a hardware fault.
    match: {kind: xid, codes: [48]}
    priority: 100
    actions:
      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
      - action: replace
"""
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 50
storm_breaker: {enabled: true, max_new_faults: 100, window: 5m}
default_cooldown: 1h
max_opt_out_hold: 8s
"""


class Run(ProcessRun):
    def __init__(self, sim: SimHandle, tmp_path: Path, database_url: str) -> None:
        self.webhook = WebhookSink()
        super().__init__(
            sim,
            tmp_path,
            database_url,
            policies={"gpu.yaml": POLICIES, "settings.yaml": SETTINGS},
            config={"notify": {"webhook_url": self.webhook.url}},
        )
        self.audit = AuditLog(make_session_factory(make_engine(database_url)), "default")

    def close(self) -> None:
        super().close()
        self.webhook.close()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "remediator", "optout", *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def audited(self, command: str) -> list[Any]:
        return list(self.audit.list(AuditQuery(commands=(command,))))

    def pods(self, *selector: str) -> list[dict[str, Any]]:
        out = self.sim.kubectl("get", "pods", "-A", *selector, "-o", "json")
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def node(self, name: str) -> dict[str, Any] | None:
        out = self.sim.kubectl("get", "nodes", "-o", "json")
        return next((n for n in json.loads(out)["items"] if n["metadata"]["name"] == name), None)


@pytest.fixture
def run(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Run]:
    sim = sim_factory(nodes=8, provision_delay=0.5)
    running = Run(sim, tmp_path, migrated_database_url)
    yield running
    running.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_short_opt_out_holds_a_faulty_node_then_expires_and_a_label_escalates(
    run: Run,
) -> None:
    labelled = {p["spec"]["nodeName"] for p in run.pods("-l", f"{LABEL}=true")}
    train = [
        n.removeprefix("node/")
        for n in run.sim.kubectl(
            "get", "nodes", "-l", "simcloud.io/nodepool=h100-train", "-o", "name"
        ).split()
    ]
    node = next(n for n in train if n not in labelled)
    label_node = next(iter(sorted(labelled)))

    # A faulty node waits for approval; the owner of its work records a short opt-out.
    run.push_xid(node, 79)
    waiting = run.wait(node, State.AWAITING_APPROVAL)
    bad = run.cli("add", "--node", node, "--until", "8d", "--reason", "too long", "--by", "alice")
    assert bad.returncode == 2 and "at most 7d" in bad.stderr, bad.stderr
    added = run.cli(
        "add", "--node", node, "--until", UNTIL, "--reason", "eval run", "--by", "alice", "--json"
    )
    assert added.returncode == 0, added.stderr
    [made] = json.loads(added.stdout)
    answer = httpx.post(
        f"{run.controller.web_url}/api/v1/remediations/{waiting.id}/approve",
        json={"reason": "go"},
        headers=OPERATOR,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text

    # It ends by itself: held by the opt-out, then (expired) drained and replaced.
    done = run.wait(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=180)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    moves = [(e.action, e.to_state) for e in done.events if e.to_state is not None]
    assert ("held_by_opt_out", State.HELD_BY_OPT_OUT) in moves, moves
    held = next(e for e in done.events if e.to_state is State.HELD_BY_OPT_OUT)
    assert held.detail.get("opt_outs") == [made["id"]], held.detail
    cleared = next(e for e in done.events if e.action == "opt_out_cleared")
    until = datetime.fromisoformat(made["until"])
    assert cleared.at >= until
    assert cleared.detail.get("expired_opt_outs") == [made["id"]], cleared.detail
    assert "expired" in json.dumps(cleared.detail) and cleared.actor == held.actor
    assert run.node(node) is None  # replaced, without a human

    adds = [a for a in run.audited("optout-add") if f"#{made['id']}:" in (a.detail or "")]
    assert len(adds) == 1 and adds[0].actor == "alice" and adds[0].source.startswith("cli ")
    assert adds[0].reason == "eval run"
    expiries = [a for a in run.audited("optout-expire") if f"#{made['id']}:" in (a.detail or "")]
    assert len(expiries) == 1 and expiries[0].actor.startswith("controller")
    listed = run.cli("list", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [o["state"] for o in json.loads(listed.stdout) if o["id"] == made["id"]] == ["expired"]

    # A pod's label (no owner, no expiry) holds a faulty node longer than max_opt_out_hold (8s).
    run.push_xid(label_node, 48)
    held_by_label = run.wait(label_node, State.HELD_BY_OPT_OUT)
    assert "label, no expiry, set since" in (held_by_label.hold_reason or "")

    def escalated() -> bool:
        record = run.record(label_node)
        return record is not None and any(e.action == "opt_out_escalated" for e in record.events)

    wait_for(escalated, timeout=120, what="the escalation")
    record = run.record(label_node)
    assert record is not None and record.state is State.HELD_BY_OPT_OUT
    overview = httpx.get(f"{run.controller.web_url}/", headers=OPERATOR, timeout=30)
    assert overview.status_code == 200
    waiting_for_you = overview.text.split('id="waiting"', 1)[1].split("</section>", 1)[0]
    assert label_node in waiting_for_you and "escalated to on-call" in waiting_for_you
    escalations = [a for a in run.audited("optout-escalate") if a.remediation_id == record.id]
    assert len(escalations) == 1 and "max_opt_out_hold" in (escalations[0].reason or "")

    def paged() -> bool:
        # One read of the list: the receiver's thread may append while this looks.
        notes = list(run.webhook.received)
        return any(
            "held by an opt-out too long" in str(n.get("text", "")) and label_node in json.dumps(n)
            for n in notes
        )

    wait_for(paged, timeout=60, what="the on-call note")
