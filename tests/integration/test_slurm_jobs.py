"""What remediator does to each Slurm job on a faulted node, against a real slurmctld/slurmd
(Debian 22.05): an array task and a heterogeneous job's component are addressed as themselves
(issue 22 item 1), a non-requeueable job's fate is decided before it is signalled and does not
depend on whether it honours SIGTERM (item 2), an opt-out names what matched (item 5), and a
stopped slurmctld is reported at once, on one line (item 4); a job recorded as left running is
never taken down with its node, and a released opt-out is decided like any job (invariant I7)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from remediator.actions.outcome import Done, Held, Outcome, Waiting
from remediator.errors import TransientError
from remediator.kube.client import KubeClient
from remediator.model.states import State
from remediator.sim.slurm.cluster import SlurmCluster
from remediator.slurm import steps
from remediator.slurm.client import SlurmCli
from remediator.slurm.engine import SlurmSteps
from remediator.slurm.settings import NotRequeueable, SlurmSettings
from tests.fixtures.slurm import job_field, job_node, restarts, submit, wait_job, write_job
from tests.unit.web.builders import event, path, record

pytestmark = pytest.mark.integration

# Ignores SIGTERM: only SIGKILL (KillWait after the SIGTERM) ends it.
STUBBORN_JOB = """#!/bin/bash
trap '' TERM
sleep 600 &
while true; do wait; done
"""


def cli(slurm: SlurmCluster) -> SlurmCli:
    return SlurmCli(SlurmSettings(enabled=True, slurm_conf=slurm.conf))


def vacate_until_done(
    slurm: SlurmCluster,
    node: str,
    settings: SlurmSettings,
    journal: steps.Journal,
    *,
    overridden: bool = False,
) -> Outcome:
    """The checkpoint step as the engine runs it: again and again, with what it did so far."""
    client, start = cli(slurm), datetime.now(UTC)
    steps.drain(client, node, "22", "xid-79", journal)
    outcome: Outcome = Waiting("not yet", 0)
    for _ in range(150):
        outcome = steps.vacate(
            client,
            node,
            settings,
            so_far=steps.JobsSoFar.read(journal.entries),
            started_at=start,
            grace_seconds=0,
            now=start + timedelta(seconds=1),
            journal=journal,
            overridden=overridden,
        )
        if not isinstance(outcome, Waiting):
            return outcome
        time.sleep(steps.POLL_SECONDS / 4)
    raise AssertionError(f"the step never ended: {outcome}")


def commands(journal: steps.Journal) -> list[str]:
    return [str(e["command"]) for e in journal.entries if "command" in e]


def test_a_fault_under_one_array_task_requeues_that_task_alone(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    script = write_job(tmp_path)
    out = slurm.run(
        "sbatch",
        "--parsable",
        "--requeue",
        "--array=0-2",
        "-o",
        f"{tmp_path}/out-%A_%a",
        str(script),
    ).stdout
    array = out.strip().split(";")[0]
    tasks = [f"{array}_{t}" for t in range(3)]
    for task in tasks:
        wait_job(slurm, task, ("RUNNING",))
    # The task whose record keeps the array's own job id: `scontrol requeue <array>` would
    # requeue every task.
    [task] = [t for t in tasks if job_field(slurm, t, "JobId") == array]
    node = job_node(slurm, task)

    journal = steps.Journal()
    done = vacate_until_done(slurm, node, SlurmSettings(), journal)

    assert isinstance(done, Done), done
    assert [c for c in commands(journal) if "requeue" in c] == [f"scontrol requeue {task}"]
    assert done.facts["slurm_fates"] == {task: done.facts["slurm_fates"][task]}
    assert done.facts["slurm_fates"][task].startswith("requeued")
    assert task in done.detail
    assert restarts(slurm, task) == 1
    assert {t: restarts(slurm, t) for t in tasks if t != task} == dict.fromkeys(
        (t for t in tasks if t != task), 0
    )
    assert {t: wait_job(slurm, t, ("RUNNING",)) for t in tasks if t != task}


def test_a_heterogeneous_job_is_signalled_by_its_component_and_requeued_whole(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    script = tmp_path / "usr1.sh"
    script.write_text(
        f"#!/bin/bash\ntrap 'echo usr1 >> {tmp_path}/usr1.$SLURM_JOB_ID' USR1\n"
        "sleep 600 &\nwhile true; do wait; done\n"
    )
    script.chmod(0o755)
    out = slurm.run(
        "sbatch",
        "--parsable",
        "--requeue",
        "-o",
        f"{tmp_path}/out-%j",
        "-w",
        "gpu-a",
        ":",
        "-w",
        "gpu-b",
        str(script),
    ).stdout
    het = out.strip().split(";")[0]
    wait_job(slurm, het, ("RUNNING",))
    journal = steps.Journal()
    settings = SlurmSettings(signal="USR1")
    done = vacate_until_done(slurm, "gpu-b", settings, journal)
    assert isinstance(done, Done), done
    assert commands(journal)[1:] == [
        f"scancel --full --signal=USR1 {het}+1",
        f"scontrol requeue {het}",
    ]
    assert done.facts["slurm_fates"][f"{het}+1"].startswith("requeued")
    assert restarts(slurm, het) == 1


@pytest.mark.parametrize("policy", ["requeue", "cancel"])
def test_a_non_requeueable_jobs_fate_does_not_depend_on_sigterm(
    slurm: SlurmCluster, tmp_path: Path, policy: str
) -> None:
    """One job checkpoints on SIGTERM and exits, the other ignores it: both get the policy."""
    obeys = submit(slurm, write_job(tmp_path / "obeys"), "--no-requeue", node="gpu-a")
    stubborn_script = tmp_path / "stubborn.sh"
    stubborn_script.write_text(STUBBORN_JOB)
    stubborn_script.chmod(0o755)
    ignores = submit(slurm, stubborn_script, "--no-requeue", node="gpu-b")
    wait_job(slurm, obeys, ("RUNNING",))
    wait_job(slurm, ignores, ("RUNNING",))
    settings = SlurmSettings(not_requeueable=NotRequeueable(policy))
    fates = {}
    for job, node in ((obeys, "gpu-a"), (ignores, "gpu-b")):
        journal = steps.Journal()
        done = vacate_until_done(slurm, node, settings, journal)
        assert isinstance(done, Done), done
        fates[job] = done.facts["slurm_fates"][str(job)]
        decisions = [e for e in journal.entries if e.get("decision")]
        assert [e["decision"] for e in decisions] == [policy]
        assert journal.entries.index(decisions[0]) < min(
            i
            for i, e in enumerate(journal.entries)
            if str(e.get("command", "")).startswith("sc")
            and "nodename" not in str(e.get("command"))
        )
    if policy == "requeue":
        assert all(f.startswith("requeued") for f in fates.values()), fates
        assert restarts(slurm, obeys) == 1 and restarts(slurm, ignores) == 1
    else:
        assert fates == {obeys: "cancelled", ignores: "cancelled"}
        assert wait_job(slurm, obeys, ("CANCELLED",)) == wait_job(slurm, ignores, ("CANCELLED",))


def test_hold_leaves_a_non_requeueable_job_unsignalled(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = submit(slurm, write_job(tmp_path), "--no-requeue", node="gpu-c")
    wait_job(slurm, job, ("RUNNING",))
    journal = steps.Journal()
    held = vacate_until_done(
        slurm, "gpu-c", SlurmSettings(not_requeueable=NotRequeueable.HOLD), journal
    )
    assert isinstance(held, Held) and held.facts["held_jobs"] == [str(job)]
    assert str(job) in held.reason and "\n" not in held.reason
    assert commands(journal)[1:] == []  # nothing sent to the job
    assert "hold" in held.facts["slurm_fates"][str(job)]
    assert not (tmp_path / f"ckpt.{job}").exists()
    assert wait_job(slurm, job, ("RUNNING",)) == "RUNNING"


def test_a_job_left_running_is_never_downed(slurm: SlurmCluster, tmp_path: Path) -> None:
    """Invariant I7, the opt-out not released: the fate says "left running", so setting the node
    DOWN (which kills the job: NODE_FAIL) is refused, holding with the reason, for as long as
    the job runs there; once it has ended the node goes DOWN."""
    client = cli(slurm)
    job = submit(slurm, write_job(tmp_path), "--requeue", "--comment=remediator:opt-out")
    wait_job(slurm, job, ("RUNNING",))
    node = job_node(slurm, job)
    journal = steps.Journal()
    done = vacate_until_done(slurm, node, SlurmSettings(), journal)
    assert isinstance(done, Done), done
    assert done.facts["slurm_fates"] == {
        str(job): "left running (opt-out: comment 'remediator:opt-out')"
    }
    left = steps.JobsSoFar.read(journal.entries).left_running
    assert left == {str(job)}

    down = steps.Journal()
    refused = steps.down(client, node, "22", "xid-79", down, left_running=left)
    assert isinstance(refused, Waiting) and refused.facts["holding"] is True, refused
    assert refused.facts["left_running"] == [str(job)] and str(job) in refused.reason
    assert down.entries == [] and not client.node(node).down
    assert wait_job(slurm, job, ("RUNNING",)) == "RUNNING"
    assert restarts(slurm, job) == 0

    slurm.run("scancel", str(job))
    wait_job(slurm, job, ("CANCELLED",))
    deadline = time.monotonic() + 60
    while steps.still_left_running(client.jobs(), node, left):
        assert time.monotonic() < deadline, f"job {job} never left {node}"
        time.sleep(steps.POLL_SECONDS / 4)
    after = steps.down(client, node, "22", "xid-79", down, left_running=left)
    assert isinstance(after, Done) and client.node(node).down, after


def test_neither_replace_nor_reboot_takes_down_a_job_the_timeline_left_running(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    """The engine's side of the refusal: the fate is read from the remediation's timeline, and
    the replacement's DOWN and the reboot both wait, holding, while the job runs."""
    job = submit(slurm, write_job(tmp_path), "--requeue", "--comment=remediator:opt-out")
    wait_job(slurm, job, ("RUNNING",))
    node = job_node(slurm, job)
    fate = "left running (opt-out: comment 'remediator:opt-out')"
    line = {"slurm_node": node, "step": "checkpoint", "job": str(job), "fate": fate}
    timeline = (
        *path(State.QUARANTINED, State.CHECKPOINTING),
        event(9, 200, None, None, "slurm", line),
    )
    written: list[object] = []
    engine = SlurmSteps(
        cli(slurm),
        SlurmSettings(),
        cast(KubeClient, None),  # the Slurm node is named on the timeline
        lambda *entry: written.append(entry),
    )
    for state in (State.REPLACING, State.REBOOTING):
        rec = record(state, timeline)
        outcome = (
            engine.before_replace(rec) if state is State.REPLACING else engine.before_reboot(rec)
        )
        assert isinstance(outcome, Waiting) and outcome.facts["holding"] is True, outcome
        assert outcome.facts["left_running"] == [str(job)], outcome
    assert written == [] and not cli(slurm).node(node).down
    assert wait_job(slurm, job, ("RUNNING",)) == "RUNNING" and restarts(slurm, job) == 0


@pytest.mark.parametrize("policy", ["requeue", "cancel", "hold"])
def test_a_released_opt_out_is_decided_like_any_job(
    slurm: SlurmCluster, tmp_path: Path, policy: str
) -> None:
    """Invariant I7, the opt-out released by on-call: a non-requeueable opted-out job gets
    `slurm.not_requeueable` before anything takes the node down, and its fate says so."""
    client = cli(slurm)
    job = submit(slurm, write_job(tmp_path), "--no-requeue", "--comment=remediator:opt-out")
    wait_job(slurm, job, ("RUNNING",))
    node = job_node(slurm, job)
    journal = steps.Journal()
    settings = SlurmSettings(not_requeueable=NotRequeueable(policy))
    outcome = vacate_until_done(slurm, node, settings, journal, overridden=True)
    [decision] = [e for e in journal.entries if e.get("decision")]
    assert decision["decision"] == policy and "released by on-call" in decision["note"]
    fate = outcome.facts["slurm_fates"][str(job)]
    left = steps.JobsSoFar.read(journal.entries).left_running
    refused = steps.down(client, node, "22", "xid-79", steps.Journal(), left_running=left)
    if policy == "hold":
        assert isinstance(outcome, Held) and fate.startswith("left running"), (outcome, fate)
        assert isinstance(refused, Waiting) and refused.facts["holding"] is True, refused
        assert wait_job(slurm, job, ("RUNNING",)) == "RUNNING" and not client.node(node).down
        return
    assert isinstance(outcome, Done) and left == frozenset(), (outcome, journal.entries)
    assert isinstance(refused, Done) and client.node(node).down, refused
    if policy == "requeue":
        assert fate.startswith("requeued") and restarts(slurm, job) == 1, fate
    else:
        assert fate == "cancelled" and wait_job(slurm, job, ("CANCELLED",)) == "CANCELLED"


def test_an_opt_out_by_feature_names_the_feature(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = submit(slurm, write_job(tmp_path), "--requeue", "--constraint=no-remediation")
    wait_job(slurm, job, ("RUNNING",))
    node = job_node(slurm, job)
    settings = SlurmSettings(opt_out_feature="no-remediation")
    held = steps.check_opt_out(cli(slurm), node, settings)
    assert isinstance(held, Held)
    assert "feature 'no-remediation'" in held.reason and str(job) in held.reason
    assert "remediator:opt-out" not in held.reason


def test_a_stopped_slurmctld_is_said_at_once_and_on_one_line(slurm: SlurmCluster) -> None:
    client = cli(slurm)
    slurm.stop_controller()
    try:
        for call in (client.jobs, lambda: client.set_node_state("gpu-a", "drain", "x")):
            with pytest.raises(TransientError) as caught:
                call()
            # `scontrol ping`'s answer, not the command's own after its retries (~20 s here).
            assert "slurmctld unreachable" in str(caught.value)
            assert "is DOWN" in str(caught.value) and "\n" not in str(caught.value)
            assert "*" not in str(caught.value)
    finally:
        slurm.start_controller()
    slurm.wait_idle(slurm.nodes)
