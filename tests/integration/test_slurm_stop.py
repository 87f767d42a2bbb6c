"""Stopping a simulated Slurm ends its jobs first: slurmd detaches slurmstepd and the job
scripts, so stopping the daemons alone leaves them running (issue 22, item 3). The cluster's own
stop, `sim serve --slurm` on SIGINT, and the test session's Slurm all go through it."""

from __future__ import annotations

import signal
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
