"""XID 79 on a node that runs a Slurm job, end to end with a real slurmctld/slurmd (`sim serve
--slurm`) and the real controller: the Slurm node is drained with remediator's reason, the job
gets SIGTERM (through its requeue), writes its checkpoint, runs again on another node and
completes; the machine is replaced and its Slurm node is back IDLE. Also: an opted-out job holds
the node (released by on-call, it is requeued before the node goes DOWN), a human's drain is
never resumed, and slurmctld stopped mid-way holds the step with the reason until it answers
again."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediator.model.states import State
from remediator.remediation import commands
from remediator.store.records import RemediationRecord
from remediator.web import views
from tests.fixtures.sim import SimHandle
from tests.fixtures.slurm import (
    SlurmShell,
    job_field,
    job_node,
    restarts,
    submit,
    wait_job,
    write_job,
)
from tests.integration.engine_support import (
    SETTINGS,
    Engine,
    start_engine,
    wait_for,
    xid,
)

pytestmark = pytest.mark.integration

POLICY = """
policies:
  - name: xid-79-fallen-off-bus
    description: The GPU has fallen off the bus.
    why: A GPU off the bus is dead to every job on the node.
    match:
      kind: xid
      codes: [79]
    priority: 100
    actions:
      - action: cordon
      - action: checkpoint
        max_grace: 40s
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
"""


# Long enough that the requeued job starts again (Slurm's requeue delay is cred_expire, 10 s)
# before the replacement machine can take the freed Slurm name.
SLOW_PROVISION = 30.0


@pytest.fixture
def sim(sim_factory: Callable[..., SimHandle], request: pytest.FixtureRequest) -> SimHandle:
    delay = SLOW_PROVISION if request.node.get_closest_marker("slow_provision") else 1.0
    return sim_factory(nodes=8, provision_delay=delay, slurm=True)


@pytest.fixture
def shell(sim: SimHandle) -> SlurmShell:
    assert sim.slurm is not None
    return SlurmShell(sim.slurm["slurm_conf"])


@pytest.fixture
def engine(sim: SimHandle, migrated_database_url: str, tmp_path: Path) -> Iterator[Engine]:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "xid.yaml").write_text(POLICY)
    (policies / "settings.yaml").write_text(
        SETTINGS.format(pool_percent=50, cluster_percent=50, max_concurrent=10, max_new_faults=20)
    )
    handle = start_engine(sim, migrated_database_url, policies, slurm=sim.slurm)
    yield handle
    handle.close()


def slurm_lines(record: RemediationRecord) -> list[str]:
    return [str(e.detail.get("command")) for e in record.events if e.action == "slurm"]


def stop_slurmctld(shell: SlurmShell, conf: Path) -> None:
    pid = int((conf.parent / "slurmctld.pid").read_text())
    subprocess.run(["kill", str(pid)], check=True)
    wait_for(lambda: shell.run("sinfo", check=False).returncode != 0, 30, "slurmctld down")


def start_slurmctld(conf: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["slurmctld", "-D", "-f", str(conf), "-i"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def hold_reason_of(engine: Engine, node: str) -> Callable[[], str]:
    def reason() -> str:
        record = engine.of_node(node)
        return (record.hold_reason if record is not None else None) or ""

    return reason


def holding_on_slurmctld(engine: Engine, node: str) -> Callable[[], bool]:
    """True once a step of the node's remediation holds with "slurmctld unreachable"."""

    def holding() -> bool:
        record = engine.of_node(node)
        return record is not None and any(
            "slurmctld unreachable" in str(e.detail.get("reason", ""))
            for e in record.events
            if e.action == "progress"
        )

    return holding


@pytest.mark.slow_provision
def test_a_checkpointing_job_is_requeued_and_completes_elsewhere(
    engine: Engine, shell: SlurmShell, tmp_path: Path
) -> None:
    script = write_job(tmp_path / "jobs")
    job = submit(shell, script, "--requeue")
    wait_job(shell, job, ("RUNNING",))
    node = job_node(shell, job)

    engine.push(xid(node))
    record = engine.wait_state(node, State.CHECKPOINTING, State.DRAINING, State.REPLACING)
    reason = f"remediator #{record.id}: xid-79-fallen-off-bus"
    seen = shell.node(node)
    assert "DRAIN" in seen["State"] or "DOWN" in seen["State"], seen
    assert seen["Reason"].startswith(reason), seen

    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=120)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    assert f"scontrol requeue {job}" in slurm_lines(done)
    assert any(
        line.startswith(f"scontrol update nodename={node} state=drain")
        for line in slurm_lines(done)
    )
    assert f"scontrol update nodename={node} state=resume" in slurm_lines(done)

    wait_job(shell, job, ("COMPLETED",), timeout=90)
    log = (tmp_path / "jobs" / f"log.{job}").read_text().splitlines()
    assert log[:2] == [f"started on {node}", f"checkpointed on {node}"]
    # It resumed from its checkpoint on another Slurm node, while its own was still being
    # replaced, and ran to completion there.
    assert log[2].startswith(f"resumed step-42 from {node} on ")
    elsewhere = log[2].removeprefix(f"resumed step-42 from {node} on ").split()[0]
    assert elsewhere != node and job_node(shell, job) == elsewhere, log
    # The replacement machine rejoined under the same Slurm name and is back in the partition.
    wait_for(lambda: shell.node(node)["State"] == "IDLE", 60, f"{node} IDLE")
    assert shell.node(node)["Reason"] == ""


def test_a_cancel_resumes_only_the_slurm_node_we_drained(
    engine: Engine, shell: SlurmShell, tmp_path: Path
) -> None:
    job = submit(shell, write_job(tmp_path / "jobs"), "--requeue", "--comment=remediator:opt-out")
    wait_job(shell, job, ("RUNNING",))
    node = job_node(shell, job)
    engine.push(xid(node))
    held = engine.wait_state(node, State.HELD_BY_OPT_OUT)
    assert "DRAIN" in shell.node(node)["State"]
    commands.run(engine.repository, "cancel", held.id, actor="carol", reason="keep it")
    wait_for(lambda: "DRAIN" not in shell.node(node)["State"], 60, f"{node} resumed")
    assert shell.node(node)["Reason"] == "" and wait_job(shell, job, ("RUNNING",)) == "RUNNING"


def test_an_opted_out_job_holds_the_node(engine: Engine, shell: SlurmShell, tmp_path: Path) -> None:
    script = write_job(tmp_path / "jobs")
    job = submit(shell, script, "--requeue", "--comment=remediator:opt-out")
    wait_job(shell, job, ("RUNNING",))
    node = job_node(shell, job)

    engine.push(xid(node))
    held = engine.wait_state(node, State.HELD_BY_OPT_OUT)
    assert held.hold_reason and str(job) in held.hold_reason, held.hold_reason
    assert "DRAIN" in shell.node(node)["State"]
    assert wait_job(shell, job, ("RUNNING",)) == "RUNNING"  # untouched
    assert not [line for line in slurm_lines(held) if "requeue" in line]

    shell.run("scancel", str(job))  # the job ends: the remediation goes on
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=120)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason


def test_a_released_opt_out_is_requeued_before_the_node_goes_down(
    engine: Engine, shell: SlurmShell, tmp_path: Path
) -> None:
    """Invariant I7: on-call's release overrides the opt-out, so the job's fate is decided like
    any other's (not requeueable: `slurm.not_requeueable`, here the default `requeue`) before
    the node goes DOWN; the timeline and the API say what Slurm did, and Slurm agrees."""
    script = write_job(tmp_path / "jobs")
    job = submit(shell, script, "--no-requeue", "--comment=remediator:opt-out")
    wait_job(shell, job, ("RUNNING",))
    node = job_node(shell, job)
    engine.push(xid(node))
    held = engine.wait_state(node, State.HELD_BY_OPT_OUT)
    commands.run(engine.repository, "release", held.id, actor="carol", reason="replace it")

    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=120)
    [row] = views.slurm_jobs(done.events)
    assert row.job == str(job) and row.fate is not None and row.fate.startswith("requeued"), row
    assert any(
        "opt-out (comment 'remediator:opt-out') was released by on-call" in c for c in row.commands
    ), row
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    assert f"scontrol requeue {job}" in slurm_lines(done)
    fates = [str(e.detail["fate"]) for e in done.events if e.detail.get("fate")]
    assert not [f for f in fates if f.startswith("left running")], fates
    # Slurm's side of the same fate: requeued once (not NODE_FAIL with the node), it resumes
    # from its checkpoint and completes.
    wait_job(shell, job, ("COMPLETED",), timeout=90)
    assert restarts(shell, job) == 1
    log = (tmp_path / "jobs" / f"log.{job}").read_text().splitlines()
    assert log[:2] == [f"started on {node}", f"checkpointed on {node}"], log
    assert log[2].startswith(f"resumed step-42 from {node} on "), log


def test_a_human_drain_is_never_resumed(engine: Engine, shell: SlurmShell) -> None:
    node = "h100-train-0001"
    shell.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=ops: fan check")
    engine.push(xid(node))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=120)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    seen = shell.node(node)
    assert "DRAIN" in seen["State"] and seen["Reason"].startswith("ops: fan check"), seen
    assert not [line for line in slurm_lines(done) if "state=resume" in line]


def test_slurmctld_down_holds_the_step_until_it_returns(
    engine: Engine, sim: SimHandle, shell: SlurmShell, tmp_path: Path
) -> None:
    assert sim.slurm is not None
    conf = Path(sim.slurm["slurm_conf"])
    script = write_job(tmp_path / "jobs")
    job = submit(shell, script, "--requeue")
    wait_job(shell, job, ("RUNNING",))
    node = job_node(shell, job)
    stop_slurmctld(shell, conf)
    restarted: subprocess.Popen[bytes] | None = None
    try:
        engine.push(xid(node))
        wait_for(holding_on_slurmctld(engine, node), 60, "the step to hold on slurmctld")
        # The hold's reason is in the API, on one line, from `scontrol ping` (said at once, not
        # after the command's own retries); the record's field is written with the step's wait,
        # just after the timeline's progress line.
        hold_reason = hold_reason_of(engine, node)
        wait_for(lambda: "slurmctld unreachable" in hold_reason(), 60, "the hold reason")
        record = engine.of_node(node)
        assert record is not None and record.state is State.QUARANTINED
        assert record.new_node is None and record.replacement_operation_id is None
        assert record.hold_reason and "slurmctld unreachable" in record.hold_reason
        assert "is DOWN" in record.hold_reason and "\n" not in record.hold_reason
        restarted = start_slurmctld(conf)
        done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=150)
        assert done.state is State.SUCCEEDED, done.error or done.hold_reason
        assert f"scontrol requeue {job}" in slurm_lines(done)
        assert done.hold_reason is None
    finally:
        if restarted is not None:
            restarted.terminate()
            restarted.wait(timeout=60)


def test_slurmctld_stopped_after_the_requeue_holds_the_replacement(
    engine: Engine, sim: SimHandle, shell: SlurmShell, tmp_path: Path
) -> None:
    assert sim.slurm is not None
    conf = Path(sim.slurm["slurm_conf"])
    job = submit(shell, write_job(tmp_path / "jobs"), "--requeue")
    wait_job(shell, job, ("RUNNING",))
    node = job_node(shell, job)
    engine.push(xid(node))
    checkpointing = engine.wait_state(node, State.CHECKPOINTING)
    wait_for(
        lambda: f"scontrol requeue {job}" in slurm_lines(engine.of_node(node) or checkpointing)
    )
    stop_slurmctld(shell, conf)
    restarted: subprocess.Popen[bytes] | None = None
    try:
        wait_for(holding_on_slurmctld(engine, node), 90, "a step to hold on slurmctld")
        record = engine.of_node(node)
        assert record is not None
        assert record.state in (State.CHECKPOINTING, State.DRAINING, State.REPLACING)
        assert record.replacement_operation_id is None and record.new_node is None
        restarted = start_slurmctld(conf)
        done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=150)
        assert done.state is State.SUCCEEDED, done.error or done.hold_reason
        wait_job(shell, job, ("RUNNING", "COMPLETED"), timeout=90)
    finally:
        if restarted is not None:
            restarted.terminate()
            restarted.wait(timeout=60)


def test_a_fault_under_one_array_task_requeues_that_task_alone(
    engine: Engine, shell: SlurmShell, tmp_path: Path
) -> None:
    """Issue 22 item 1: the task whose record carries the array's own job id is the worst case
    (`scontrol requeue <array>` requeues every task)."""
    script = write_job(tmp_path / "jobs")
    out = shell.run(
        "sbatch",
        "--parsable",
        "--requeue",
        "--array=0-2",
        "-o",
        f"{script.parent}/out-%A_%a",
        str(script),
    ).stdout
    array = out.strip().split(";")[0]
    tasks = [f"{array}_{t}" for t in range(3)]
    for task in tasks:
        wait_job(shell, task, ("RUNNING",))
    [task] = [t for t in tasks if job_field(shell, t, "JobId") == array]
    others = [t for t in tasks if t != task]
    node = job_node(shell, task)

    engine.push(xid(node))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=120)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    requeues = [line for line in slurm_lines(done) if line.startswith("scontrol requeue")]
    assert requeues == [f"scontrol requeue {task}"]
    assert restarts(shell, task) == 1
    assert {t: restarts(shell, t) for t in others} == dict.fromkeys(others, 0)
    assert {t: wait_job(shell, t, ("RUNNING",)) for t in others} == dict.fromkeys(others, "RUNNING")
    # The timeline and the API name the task.
    [row] = views.slurm_jobs(done.events)
    assert row.job == task and row.fate is not None and row.fate.startswith("requeued"), row
