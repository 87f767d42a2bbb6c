"""The Slurm adapter and steps against a real slurmctld/slurmd (Debian 22.05): what the CLIs
answer, how errors are classified, and a checkpointing job requeued off a drained node."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.actions.outcome import Done, Held, Waiting
from remediator.errors import NotFoundError, TransientError
from remediator.kube.objects import Node
from remediator.signals.model import SignalKind
from remediator.sim.slurm.cluster import SlurmCluster
from remediator.slurm import steps
from remediator.slurm.client import SlurmCli
from remediator.slurm.settings import NotRequeueable, SlurmSettings
from remediator.slurm.source import SlurmNodeSource
from tests.fixtures.slurm import job_node, submit, wait_job, write_job

pytestmark = pytest.mark.integration


def cli(slurm: SlurmCluster) -> SlurmCli:
    return SlurmCli(SlurmSettings(enabled=True, slurm_conf=slurm.conf))


def test_nodes_jobs_and_drain_reason(slurm: SlurmCluster, tmp_path: Path) -> None:
    client = cli(slurm)
    assert {n.name: n.state for n in client.nodes()} == dict.fromkeys(slurm.nodes, "idle")
    script = write_job(tmp_path)
    job = submit(slurm, script, "--requeue", "--comment=remediator:opt-out", node="gpu-a")
    wait_job(slurm, job, ("RUNNING",))
    [seen] = [j for j in client.jobs() if j.id == str(job)]
    assert seen.nodes == ("gpu-a",) and seen.requeue and "remediator:opt-out" in seen.comment

    journal = steps.Journal()
    outcome = steps.drain(client, "gpu-a", "7", "xid-79-fallen-off-bus", journal)
    assert isinstance(outcome, Done)
    node = client.node("gpu-a")
    assert node.drained and node.reason == "remediator #7: xid-79-fallen-off-bus"
    assert journal.entries[0]["command"].startswith("scontrol update nodename=gpu-a state=drain")
    # The opted-out job holds the node and is left running.
    held = steps.check_opt_out(client, "gpu-a", SlurmSettings())
    assert isinstance(held, Held) and held.facts["slurm_jobs"] == [str(job)]


def test_errors_are_classified(slurm: SlurmCluster) -> None:
    client = cli(slurm)
    with pytest.raises(NotFoundError, match="Invalid node name"):
        client.set_node_state("no-such-node", "drain", "x")
    slurm.stop_controller()
    try:
        with pytest.raises(TransientError, match="slurmctld unreachable"):
            client.jobs()  # squeue --json answers 0 with an errors list: not "no jobs"
        with pytest.raises(TransientError, match="slurmctld unreachable"):
            client.set_node_state("gpu-a", "drain", "x")
    finally:
        slurm.start_controller()
    slurm.wait_idle(slurm.nodes)


def test_a_requeueable_job_checkpoints_and_completes_elsewhere(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    client = cli(slurm)
    script = write_job(tmp_path)
    job = submit(slurm, script, "--requeue")
    wait_job(slurm, job, ("RUNNING",))
    node = job_node(slurm, job)
    steps.drain(client, node, "8", "xid-79", steps.Journal())
    start = datetime.now(UTC)
    journal = steps.Journal()
    first = steps.vacate(
        client,
        node,
        SlurmSettings(),
        so_far=steps.JobsSoFar(),
        started_at=start,
        grace_seconds=60,
        now=start,
        journal=journal,
    )
    assert isinstance(first, Waiting)
    assert [e.get("command") for e in journal.entries][1] == f"scontrol requeue {job}"
    wait_job(slurm, job, ("COMPLETED",), timeout=90)
    assert (tmp_path / f"ckpt.{job}").read_text().startswith(f"step-42 from {node}")
    log = (tmp_path / f"log.{job}").read_text().splitlines()
    assert log[0] == f"started on {node}" and log[1] == f"checkpointed on {node}"
    assert log[2].startswith(f"resumed step-42 from {node} on ")
    assert job_node(slurm, job) != node
    later = start + timedelta(seconds=1)
    after = steps.vacate(
        client,
        node,
        SlurmSettings(),
        so_far=steps.JobsSoFar(),
        started_at=start,
        grace_seconds=60,
        now=later,
        journal=steps.Journal(),
    )
    assert isinstance(after, Done)


def test_resume_only_our_drain(slurm: SlurmCluster) -> None:
    client = cli(slurm)
    slurm.run("scontrol", "update", "nodename=gpu-c", "state=drain", "reason=disk check by ops")
    assert isinstance(steps.drain(client, "gpu-c", "9", "xid-79", steps.Journal()), Done)
    assert client.node("gpu-c").reason == "disk check by ops"  # not overwritten
    journal = steps.Journal()
    outcome = steps.resume(client, "gpu-c", "9", journal)
    assert isinstance(outcome, Done) and not journal.entries
    assert client.node("gpu-c").drained


def test_slurms_own_drains_become_signals(slurm: SlurmCluster) -> None:
    settings = SlurmSettings(enabled=True, slurm_conf=slurm.conf)
    slurm.run("scontrol", "update", "nodename=gpu-a", "state=drain", "reason=NHC: /scratch gone")
    steps.drain(cli(slurm), "gpu-b", "3", "xid-79", steps.Journal())  # ours: not a signal
    nodes = [Node(name=n, uid=n, resource_version="1") for n in ("gpu-a", "gpu-b", "gpu-c")]
    result = SlurmNodeSource(cli(slurm), settings, lambda: nodes).poll(datetime.now(UTC))
    assert result.health.up
    [signal] = result.signals
    assert signal.node == "gpu-a" and signal.kind is SignalKind.SLURM_NODE
    assert signal.labels["state"] == "drain" and signal.labels["reason_prefix"] == "NHC"
    assert signal.labels["reason"] == "NHC: /scratch gone"
    slurm.stop_controller()
    try:
        down = SlurmNodeSource(cli(slurm), settings, lambda: nodes).poll(datetime.now(UTC))
        assert not down.health.up and "slurmctld unreachable" in (down.health.error or "")
    finally:
        slurm.start_controller()
    slurm.wait_idle(("gpu-c",))


USR1_JOB = """#!/bin/bash
trap 'echo usr1 > {dir}/usr1.$SLURM_JOB_ID' USR1
sleep 600 &
while true; do wait; done
"""


@pytest.mark.parametrize("policy", ["cancel", "hold", "requeue"])
def test_usr1_then_the_policy_for_jobs_that_did_not_opt_into_requeue(
    slurm: SlurmCluster, tmp_path: Path, policy: str
) -> None:
    script = tmp_path / "usr1.sh"
    script.write_text(USR1_JOB.format(dir=tmp_path))
    job = submit(slurm, script, "--no-requeue")
    wait_job(slurm, job, ("RUNNING",))
    node = job_node(slurm, job)
    settings = SlurmSettings(signal="USR1", not_requeueable=NotRequeueable(policy))
    client, start = cli(slurm), datetime.now(UTC)
    steps.drain(client, node, "4", "xid-79", steps.Journal())

    journal = steps.Journal()
    args = {"started_at": start, "grace_seconds": 30.0, "journal": journal}

    def so_far() -> steps.JobsSoFar:
        return steps.JobsSoFar.read(journal.entries)

    first = steps.vacate(client, node, settings, so_far=so_far(), now=start, **args)
    sent = [e for e in journal.entries if "command" in e]
    if policy == "hold":
        # Decided before any signal: a job left running for a human is not signalled at all.
        assert isinstance(first, Held) and first.facts["held_jobs"] == [str(job)]
        assert sent == []
        assert wait_job(slurm, job, ("RUNNING",)) == "RUNNING"
        return
    assert isinstance(first, Waiting)
    allow = [f"scontrol update jobid={job} requeue=1"] if policy == "requeue" else []
    assert [e["command"] for e in sent] == [*allow, f"scancel --full --signal=USR1 {job}"]
    assert sent[-1]["signalled"] is True and sent[-1]["job"] == str(job)
    wait_for_file(tmp_path / f"usr1.{job}")
    # Within the grace the signal is not sent twice; after it, the policy.
    again = steps.vacate(client, node, settings, so_far=so_far(), now=start, **args)
    assert isinstance(again, Waiting) and [e for e in journal.entries if "command" in e] == sent
    late = start + timedelta(seconds=31)
    steps.vacate(client, node, settings, so_far=so_far(), now=late, **args)
    commands = [e["command"] for e in journal.entries if "command" in e][len(sent) :]
    if policy == "cancel":
        assert commands == [f"scancel {job}"]
        wait_job(slurm, job, ("CANCELLED",))
    else:
        assert commands == [f"scontrol requeue {job}"]  # allowed before the signal
        wait_job(slurm, job, ("PENDING",))
        slurm.run("scancel", str(job))


def wait_for_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)
