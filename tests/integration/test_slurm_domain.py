"""A Slurm job whose node list spans an NVLink domain, against a real slurmctld/slurmd (Debian
22.05, no block topology): a domain fault requeues it once, not once per tray."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.actions.outcome import Done, Waiting
from remediator.sim.slurm.cluster import SlurmCluster
from remediator.slurm import steps
from remediator.slurm.client import SlurmCli
from remediator.slurm.settings import SlurmSettings
from tests.fixtures.slurm import restarts, submit, wait_job

pytestmark = pytest.mark.integration

DOMAIN = ("gpu-a", "gpu-b")  # two trays of one rack; gpu-c is elsewhere

GANG_JOB = """#!/bin/bash
sleep 600 &
wait
"""


def test_a_job_across_the_domain_is_requeued_once(slurm: SlurmCluster, tmp_path: Path) -> None:
    client = SlurmCli(SlurmSettings(enabled=True, slurm_conf=slurm.conf))
    script = tmp_path / "gang.sh"
    script.write_text(GANG_JOB)
    job = submit(slurm, script, "--requeue", "-N", "2", node=",".join(DOMAIN))
    alone = submit(slurm, script, "--requeue", node="gpu-c")
    wait_job(slurm, job, ("RUNNING",))
    wait_job(slurm, alone, ("RUNNING",))
    assert restarts(slurm, job) == 0

    # The domain is fenced together first, then its jobs are vacated as one.
    for node in DOMAIN:
        steps.drain(client, node, "29", "sxid-fatal", steps.Journal())
    journal = steps.Journal()
    start = datetime.now(UTC)
    args = {"started_at": start, "grace_seconds": 60.0, "journal": journal}
    first = steps.vacate(
        client, list(DOMAIN), SlurmSettings(), so_far=steps.JobsSoFar(), now=start, **args
    )
    assert isinstance(first, Waiting)
    commands = [e["command"] for e in journal.entries if "command" in e]
    assert commands == [f"scontrol requeue {job}"]  # once for the job, not once per tray
    assert first.facts["slurm_node"] == list(DOMAIN)
    wait_job(slurm, job, ("PENDING",))
    assert restarts(slurm, job) == 1

    # The next ticks find nothing left on the domain: no second requeue; the job elsewhere stays.
    so_far = steps.JobsSoFar.read(journal.entries)
    later = start + timedelta(seconds=1)
    after = steps.vacate(client, list(DOMAIN), SlurmSettings(), so_far=so_far, now=later, **args)
    assert isinstance(after, Done), after
    assert [e["command"] for e in journal.entries if "command" in e] == commands
    assert restarts(slurm, job) == 1
    assert wait_job(slurm, alone, ("RUNNING",)) == "RUNNING"
    slurm.run("scancel", str(job), str(alone))
