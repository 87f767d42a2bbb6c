"""The shadow-mode report against a dry-run controller's own recorded decisions: the real
controller (in dry run, under the shipped RBAC) decides on XIDs in the simulator; the report, as
`remediator report` prints it, says exactly what it recorded, and flags the decisions a person
might disagree with."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from remediator.clock import utcnow
from remediator.model.states import State
from remediator.shadow.load import shadow_report
from remediator.store.records import RemediationFilter
from remediator.web.app import create_app
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, start_engine, wait_for, xid

pytestmark = pytest.mark.integration

POLICIES = """
policies:
  - name: replace-on-79
    description: A GPU off the bus replaces its node.
    why: Rehearse the replace ladder.
    match: {kind: xid, codes: [79]}
    dry_run: true
    actions:
      - action: notify
      - action: cordon
      - action: checkpoint
        max_grace: 1s
      - action: drain
      - action: replace
  - name: reboot-on-48
    description: A double-bit ECC error reboots the node.
    why: Rehearse the repair ladder.
    match: {kind: xid, codes: [48]}
    dry_run: true
    actions:
      - action: cordon
      - action: drain
      - action: reboot
      - action: diagnose
      - action: uncordon
"""
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 10
storm_breaker: {enabled: true, max_new_faults: 20, window: 5m}
default_cooldown: 1s
"""
TWICE, ONCE = "h100-train-0001", "h100-train-0002"


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=4, provision_delay=1.0)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policies.yaml").write_text(POLICIES)
    (policies / "settings.yaml").write_text(SETTINGS)
    handle = start_engine(sim, migrated_database_url, policies)
    yield handle
    handle.close()


def finish(engine: Engine, node: str, policy: str) -> None:
    def done() -> bool:
        rows = engine.repository.list(RemediationFilter(node=node, policy=policy), limit=5).rows
        return bool(rows) and rows[0].state in (State.SUCCEEDED, State.FAILED)

    wait_for(done, timeout=90, what=f"{policy} on {node} to finish")


def test_the_report_says_what_the_dry_run_recorded(
    engine: Engine, migrated_database_url: str, tmp_path: Path
) -> None:
    since = utcnow() - timedelta(minutes=1)
    engine.push(xid(TWICE, code=79))
    finish(engine, TWICE, "replace-on-79")
    engine.push(xid(TWICE, code=48))
    finish(engine, TWICE, "reboot-on-48")
    engine.push(xid(ONCE, code=79))
    finish(engine, ONCE, "replace-on-79")
    until = utcnow() + timedelta(seconds=1)

    recorded = [r for r in engine.remediations() if since <= r.created_at < until]
    assert recorded and all(r.dry_run and r.state is State.SUCCEEDED for r in recorded)
    report = shadow_report(engine.repository, since, until)

    assert report.remediations == len(recorded) == 3
    assert report.acted == 0
    assert report.by_policy == dict(Counter(r.policy for r in recorded))
    assert report.by_pool == {"h100-train": 3}
    assert report.fenced_nodes == (TWICE, ONCE)
    assert report.steps["replace"] == 2 and report.steps["reboot"] == 1
    # Every remediation here was a dry run: no real step durations to model GPU-hours from.
    assert report.gpu_hours is None and report.gpu_hours_unknown == 0
    assert report.gpu_hours_unmodelled == 3 and "replace" in report.unmodelled_steps
    assert report.would_have == {"replace": 2, "reboot": 1} and report.artefacts == ()
    assert report.holds == {} and report.breaker_trips == ()
    kinds = {(d.node, d.policy, d.kind) for d in report.disagreements}
    assert kinds == {
        (TWICE, "replace-on-79", "replace-then-repair"),
        (ONCE, "replace-on-79", "replace-on-first-fault"),
        # The simulated fleet runs a workload that opts out of replacement on this node.
        (ONCE, "replace-on-79", "opt-out"),
    }

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"database_url": migrated_database_url}))
    done = subprocess.run(
        [
            *(sys.executable, "-m", "remediator", "report", "--config", str(config)),
            *("--since", "1h", "--format", "json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    expected = report.to_json()
    keys = ("remediations", "by_policy", "by_pool", "fenced_nodes", "steps", "holds")
    for key in (*keys, "would_have", "gpu_hours", "unmodelled_steps", "artefacts"):
        assert printed[key] == expected[key], key
    assert printed["disagreements"] == expected["disagreements"]

    # The console page shows the same report.
    with TestClient(create_app(engine.controller.web_deps())) as console:
        page = console.get("/shadow?days=1", headers={"Authorization": "Bearer operator-token"})
    assert page.status_code == 200, page.text
    assert "3 in dry run" in page.text and "replace-then-repair" in page.text
    assert "cannot model them" in page.text
