"""Recorded opt-outs through the real controller (in process) and the simulator: an opt-out on
a pod holds the pod's node, an opt-out on a Slurm job (real slurmctld/slurmd) holds the job's
node and leaves the job running; each hold names the opt-out (who, until, why), and ending it
lets the remediation go on by itself."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from remediator.model.optout import Scope, Target
from remediator.model.states import State
from remediator.store.optouts import Asker
from tests.fixtures.sim import SimHandle
from tests.fixtures.slurm import SlurmShell, job_node, submit, wait_job, write_job
from tests.integration.engine_support import SETTINGS, start_engine, write_policies, xid

pytestmark = pytest.mark.integration

WEEK = timedelta(days=7)
ALICE = Asker("alice", "test")
LABEL = "remediator.io/disable-auto-replace"


def test_an_opt_out_on_a_pod_holds_its_node_until_it_is_removed(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> None:
    sim = sim_factory(nodes=8, provision_delay=1.0)
    engine = start_engine(sim, migrated_database_url, write_policies(tmp_path / "policies"))
    try:
        pods = json.loads(sim.kubectl("get", "pods", "-A", "-o", "json"))["items"]
        labelled = {p["spec"].get("nodeName") for p in pods if p["metadata"]["labels"].get(LABEL)}
        pod = next(
            p
            for p in pods
            if p["spec"].get("nodeName")
            and p["spec"]["nodeName"] not in labelled
            and not any(o["kind"] == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))
        )
        node, key = (
            pod["spec"]["nodeName"],
            f"{pod['metadata']['namespace']}/{pod['metadata']['name']}",
        )
        book = engine.controller.opt_outs
        made = book.add(
            Target(Scope.POD, key),
            lasting=timedelta(hours=6),
            reason="eval",
            asker=ALICE,
            longest=WEEK,
        )

        engine.push(xid(node))
        held = engine.wait_state(node, State.HELD_BY_OPT_OUT)
        assert held.hold_reason and f"opt-out #{made.id} on pod {key} by alice" in held.hold_reason
        assert all(not p["metadata"].get("deletionTimestamp") for p in engine.pods_on(node))

        book.remove(made.id, asker=ALICE, reason="eval done")
        done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=120)
        assert done.state is State.SUCCEEDED, done.error or done.hold_reason
        assert [e.action for e in done.events].count("opt_out_cleared") == 1
    finally:
        engine.close()


def test_an_opt_out_on_a_slurm_job_holds_its_node_and_leaves_the_job_running(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> None:
    sim = sim_factory(nodes=8, provision_delay=1.0, slurm=True)
    assert sim.slurm is not None
    shell = SlurmShell(sim.slurm["slurm_conf"])
    policies = write_policies(tmp_path / "policies")
    (policies / "settings.yaml").write_text(
        SETTINGS.format(pool_percent=50, cluster_percent=50, max_concurrent=10, max_new_faults=20)
    )
    engine = start_engine(sim, migrated_database_url, policies, slurm=sim.slurm)
    try:
        job = submit(shell, write_job(tmp_path / "jobs"), "--requeue")
        wait_job(shell, job, ("RUNNING",))
        node = job_node(shell, job)
        made = engine.controller.opt_outs.add(
            Target(Scope.SLURM_JOB, str(job)),
            lasting=timedelta(hours=1),
            reason="final epoch",
            asker=ALICE,
            longest=WEEK,
        )

        engine.push(xid(node))
        held = engine.wait_state(node, State.HELD_BY_OPT_OUT)
        assert held.hold_reason and f"opt-out #{made.id} on slurm job {job}" in held.hold_reason
        assert wait_job(shell, job, ("RUNNING",)) == "RUNNING"  # untouched

        engine.controller.opt_outs.remove(made.id, asker=ALICE, reason="epoch saved")
        shell.run("scancel", str(job))
        done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=120)
        assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    finally:
        engine.close()
