"""Stopping a simulated Slurm ends its jobs first: slurmd detaches slurmstepd and the job
scripts, so stopping the daemons alone leaves them running (issue 22, item 3). The cluster's own
stop, `sim serve --slurm` on SIGINT, and the test session's Slurm all go through it. It stops
only what it started: a shell (or a controller) with the cluster's SLURM_CONF exported is not
the simulator's, and a daemon of it that died is reported and reaped (issue 39, item 20)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from remediator.sim.slurm.cluster import SlurmCluster
from tests.fixtures.sim import SimHandle
from tests.fixtures.slurm import SlurmShell, slurm_processes, submit, wait_job, write_job
from tests.integration.engine_support import wait_for

pytestmark = pytest.mark.integration


def test_stopping_a_cluster_ends_its_running_jobs(tmp_path: Path) -> None:
    cluster = SlurmCluster(tmp_path / "slurm", ("solo", "duo")).start()
    try:
        job = submit(cluster, write_job(tmp_path / "jobs"), "--requeue")
        wait_job(cluster, job, ("RUNNING",))
        wait_for(lambda: bool(slurm_processes(cluster.conf)), 30, "the job's processes")
        # A job that names no output file: its slurm-N.out never lands in the working tree.
        bare = cluster.run("sbatch", "--parsable", "--wrap", "sleep 600").stdout.strip()
        wait_job(cluster, int(bare), ("RUNNING",))
    finally:
        cluster.stop()
    assert slurm_processes(cluster.conf) == []
    assert not list(Path.cwd().glob(f"slurm-{bare}.out"))


def test_stopping_a_cluster_whose_slurmctld_is_down_kills_its_steps(tmp_path: Path) -> None:
    """No scancel answers: the steps are found as the cluster's (slurmstepd by its node's log
    held open, its tasks by their session) and killed."""
    cluster = SlurmCluster(tmp_path / "slurm", ("solo",)).start()
    try:
        job = submit(cluster, write_job(tmp_path / "jobs"))
        wait_job(cluster, job, ("RUNNING",))
        wait_for(lambda: len(slurm_processes(cluster.conf)) >= 3, 30, "the step and its tasks")
        cluster.stop_controller()
    finally:
        cluster.stop()
    wait_for(lambda: slurm_processes(cluster.conf) == [], 10, "the step and its tasks gone")


def test_sim_serve_slurm_ends_its_jobs_on_sigint(
    sim_factory: Callable[..., SimHandle], tmp_path: Path
) -> None:
    sim = sim_factory(nodes=2, slurm=True)
    assert sim.slurm is not None
    conf = sim.slurm["slurm_conf"]
    shell = SlurmShell(conf)
    job = submit(shell, write_job(tmp_path / "jobs"), "--requeue")
    wait_job(shell, job, ("RUNNING",))
    wait_for(lambda: bool(slurm_processes(conf)), 30, "the job's processes")
    sim.proc.send_signal(signal.SIGINT)
    assert sim.proc.wait(timeout=60) == 0
    assert slurm_processes(conf) == []


def test_sim_serve_slurm_stop_spares_other_processes_with_its_slurm_conf(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(nodes=2, slurm=True)
    assert sim.slurm is not None
    # A user's shell job after `export SLURM_CONF=…`: not the simulator's to stop.
    bystander = subprocess.Popen(
        ["sleep", "600"], env={**os.environ, "SLURM_CONF": sim.slurm["slurm_conf"]}
    )
    try:
        sim.proc.send_signal(signal.SIGINT)
        assert sim.proc.wait(timeout=60) == 0
        assert bystander.poll() is None, f"the simulator killed it ({bystander.returncode})"
    finally:
        bystander.kill()
        bystander.wait(timeout=10)


def test_a_dead_slurmctld_is_reported_and_reaped(sim_factory: Callable[..., SimHandle]) -> None:
    sim = sim_factory(nodes=2, slurm=True)
    assert sim.slurm is not None
    pid = int((Path(sim.slurm["slurm_conf"]).parent / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: "slurmctld exited" in sim.log_path.read_text(), 30, "the simulator's report")
    line = next(x for x in sim.log_path.read_text().splitlines() if "slurmctld exited" in x)
    assert f"pid {pid}" in line and "SIGKILL" in line and "slurmctld.log" in line, line
    # Reaped: a zombie keeps its /proc entry until its parent waits for it.
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 30, "slurmctld reaped")
