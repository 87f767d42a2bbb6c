"""A Slurm job whose node list spans an NVLink domain, through the real controller against the
real slurmctld/slurmd of `sim serve --topology nvl72 --slurm` (Debian's 22.05: no block
topology, so the node list is what tells): a fatal SXid on the rack drains every tray's Slurm
node with remediator's reason and requeues the job across them ONCE, not once per tray; a cancel
resumes every one of them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediator.model.states import State
from remediator.remediation import commands
from remediator.signals.model import Signal, SignalKind
from tests.fixtures.sim import SimHandle, start_sim
from tests.fixtures.slurm import SlurmShell, restarts, submit, wait_job
from tests.integration.engine_support import start_engine, wait_for

pytestmark = pytest.mark.integration

WAIT = 180.0
RACK0 = [f"nvl-r0-t{t:02d}" for t in range(18)]
SPANNED = RACK0[:4]

POLICY = """
policies:
  - name: nvswitch-fatal
    description: A fatal NVSwitch error degrades the whole NVLink domain.
    why: Every tray of the rack shares the switch fabric; its jobs leave it together.
    match: {kind: sxid, labels: {fatal: "true"}}
    scope: domain
    priority: 100
    actions:
      - action: cordon
      - action: checkpoint
        max_grace: 30s
      - action: drain
        timeout: 1m
        on_timeout: force
"""

JOB = """#!/bin/bash
sleep 600 &
wait
"""


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimHandle]:
    handle = start_sim(
        tmp_path / "sim",
        rbac=False,
        slurm=True,
        extra_args=("--topology", "nvl72", "--racks", "1"),
    )
    yield handle
    handle.stop()


def sxid(node: str) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind.SXID,
        source="push",
        observed_at=datetime.now(UTC),
        code=22003,
        labels={"fatal": "true", "switch": "3"},
    )


def test_a_job_spanning_the_domain_is_requeued_once(
    sim: SimHandle, migrated_database_url: str, tmp_path: Path
) -> None:
    assert sim.slurm is not None
    shell = SlurmShell(sim.slurm["slurm_conf"])
    script = tmp_path / "jobs" / "gang.sh"
    script.parent.mkdir()
    script.write_text(JOB)
    job = submit(shell, script, "--requeue", "-N", str(len(SPANNED)), node=",".join(SPANNED))
    wait_job(shell, job, ("RUNNING",), timeout=WAIT)

    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "sxid.yaml").write_text(POLICY)
    engine = start_engine(sim, migrated_database_url, policies, slurm=sim.slurm)
    try:
        engine.push(*(sxid(node) for node in RACK0))
        record = engine.wait_state(RACK0[0], State.HELD, State.FAILED, timeout=WAIT)
        assert record.state is State.HELD, record.error
        sent = [
            str(e.detail["command"])
            for e in record.events
            if e.action == "slurm" and "command" in e.detail
        ]
        assert sent.count(f"scontrol requeue {job}") == 1, sent
        assert restarts(shell, job) == 1
        reason = f"remediator #{record.id}: nvswitch-fatal"
        for node in RACK0:
            seen = shell.node(node)
            assert "DRAIN" in seen["State"], (node, seen)
            assert seen["Reason"].startswith(reason), (node, seen)

        # A cancel gives every tray's Slurm node back, not just the lead tray's.
        commands.run(engine.repository, "cancel", record.id, actor="carol", reason="done")
        wait_for(
            lambda: not any("DRAIN" in shell.node(n)["State"] for n in RACK0),
            WAIT,
            "every tray's Slurm node resumed",
        )
    finally:
        engine.close()
