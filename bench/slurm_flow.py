"""Slurm flow: from an XID 79 on a node that runs a checkpointing Slurm job to that job running
again on another node, with a real slurmctld/slurmd (`sim serve --slurm`) and the real
controller; against Slurm's own floor, a bare `scontrol requeue` to running again, in the same run.

Method: one `remediator sim serve --nodes 8 --slurm`; the controller in-process (SQLite, leader
election off, its jobs running, advance every 0.2 s). Each sample submits a requeueable job (it
traps SIGTERM, writes a checkpoint, and when started again stamps the time and sleeps), waits
until it runs, pushes XID 79 for its node and reads: the Slurm node DRAIN with our reason, the
requeue on the timeline, the job's own "resumed" stamp (wall clock, written by the job on its
new node), and the remediation SUCCEEDED with the node IDLE again. The floor: the same job on
a healthy node, `scontrol requeue` by hand, to its resumed stamp. The test cluster's
`cred_expire` is 10 s (Slurm's default is 120 s), and it bounds both: a requeued job may not
start before it.

Usage: python -m bench.slurm_flow [--samples N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.settings import LeaderElectionSettings, ProviderSettings, Settings
from remediator.signals.model import Signal, SignalKind
from remediator.sim.launch import SimHandle, start_sim
from remediator.sim.slurm.machines import SLURM_NODE_LABEL
from remediator.slurm.settings import SlurmSettings
from remediator.store.db import upgrade
from remediator.store.records import RemediationFilter, RemediationRecord
from tests.fixtures.slurm import SlurmShell, job_node, submit, wait_job

POLICY = """
policies:
  - name: xid-79-fallen-off-bus
    description: The GPU has fallen off the bus.
    why: Requeue the node's jobs and replace it.
    match:
      kind: xid
      codes: [79]
    priority: 100
    actions:
      - action: cordon
      - action: checkpoint
        max_grace: 5s
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
"""
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 100
storm_breaker: {enabled: false}
"""
JOB = """#!/bin/bash
dir={dir}
ck="$dir/ckpt.$SLURM_JOB_ID"
if [ -f "$ck" ]; then
    date +%s.%N > "$dir/resumed.$SLURM_JOB_ID"
    sleep 300
    exit 0
fi
checkpoint() {{
    echo step-42 > "$ck"
    exit 0
}}
trap checkpoint TERM
sleep 600 &
wait
"""


def wait(predicate: Callable[[], object], timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return time.time()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def resumed_at(jobs: Path, job: int, timeout: float = 180) -> float:
    stamp = jobs / f"resumed.{job}"
    wait(lambda: stamp.exists() and stamp.read_text().strip(), timeout, f"job {job} resumed")
    return float(stamp.read_text())


def floor_sample(shell: SlurmShell, script: Path, jobs: Path) -> float:
    """Slurm's floor: a hand-made requeue on a healthy node, to running again."""
    job = submit(shell, script, "--requeue")
    wait_job(shell, job, ("RUNNING",))
    t0 = time.time()
    shell.run("scontrol", "requeue", str(job))
    took = resumed_at(jobs, job) - t0
    shell.run("scancel", str(job))
    return took


def flow_sample(
    controller: Controller, sim: SimHandle, shell: SlurmShell, script: Path, jobs: Path
) -> dict[str, float]:
    job = submit(shell, script, "--requeue")
    wait_job(shell, job, ("RUNNING",))
    node = job_node(shell, job)
    # A replaced machine keeps its Slurm name under a new Kubernetes name: the label maps them.
    host = sim.kubectl("get", "nodes", "-l", f"{SLURM_NODE_LABEL}={node}", "-o", "name")
    kube_node = host.strip().removeprefix("node/")
    t0 = time.time()
    signal = Signal(
        node=kube_node,
        kind=SignalKind.XID,
        source="push",
        code=79,
        gpu=0,
        observed_at=datetime.now(UTC),
    )
    controller.inbox.put([signal])

    def record() -> RemediationRecord | None:
        found = controller.repository.list(RemediationFilter(node=kube_node), limit=1).rows
        return controller.repository.get(found[0].id) if found else None

    def requeued() -> bool:
        r = record()
        command = f"scontrol requeue {job}"
        return r is not None and any(
            e.action == "slurm" and e.detail.get("command") == command for e in r.events
        )

    def finished() -> bool:
        r = record()
        return r is not None and r.state is State.SUCCEEDED

    out = {"drain": wait(lambda: "DRAIN" in shell.node(node)["State"], 60, "drain") - t0}
    out["requeue"] = wait(requeued, 60, "requeue") - t0
    out["running"] = resumed_at(jobs, job) - t0
    wait(finished, 180, "remediation succeeded")
    # Back in the partition: IDLE, or already running the next job (the requeued one, when
    # the replacement was quicker than Slurm's requeue delay).
    back = ("IDLE", "ALLOCATED", "MIXED")
    out["done"] = wait(lambda: shell.node(node)["State"] in back, 60, "node back") - t0
    print(f"sample: {node}: job {job} resumed on {job_node(shell, job)}; {out}", file=sys.stderr)
    shell.run("scancel", str(job))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        workdir = Path(tmp)
        sim = start_sim(workdir / "sim", nodes=8, slurm=True)
        try:
            return run(workdir, sim, args.samples)
        finally:
            sim.stop()


def run(workdir: Path, sim: SimHandle, samples: int) -> int:
    assert sim.slurm is not None
    shell = SlurmShell(sim.slurm["slurm_conf"])
    jobs = workdir / "jobs"
    jobs.mkdir()
    script = jobs / "train.sh"
    script.write_text(JOB.format(dir=jobs))
    script.chmod(0o755)
    policies = workdir / "policies"
    policies.mkdir()
    (policies / "xid.yaml").write_text(POLICY)
    (policies / "settings.yaml").write_text(SETTINGS)
    database = f"sqlite:///{workdir / 'remediator.db'}"
    upgrade(database)
    settings = Settings(
        kubeconfig=sim.kubeconfig,
        policies_dir=policies,
        database_url=database,
        provider=ProviderSettings(url=sim.nodepool_url),
        leader_election=LeaderElectionSettings(enabled=False),
        poll_interval_seconds=60.0,
        advance_interval_seconds=0.2,
        slurm=SlurmSettings(**sim.slurm),
    )
    controller = Controller(settings, sources=[])
    controller.start(serve_web=False)
    rows: dict[str, list[float]] = {k: [] for k in ("drain", "requeue", "running", "done", "floor")}
    try:
        for _ in range(samples):
            rows["floor"].append(floor_sample(shell, script, jobs))
            for key, value in flow_sample(controller, sim, shell, script, jobs).items():
                rows[key].append(value)
    finally:
        controller.stop()
    names = {
        "drain": "XID 79 → Slurm node DRAIN (our reason)",
        "requeue": "XID 79 → job requeued (SIGTERM, checkpoint)",
        "running": "XID 79 → job running again on another node",
        "done": "XID 79 → node replaced, back in the partition",
        "floor": "bare `scontrol requeue` → running again (Slurm's floor)",
    }
    print(f"{'step':<58} {'median s':>9} {'max s':>7}")
    for key, label in names.items():
        values = rows[key]
        print(f"{label:<58} {statistics.median(values):>9.2f} {max(values):>7.2f}")
    running, floor = statistics.median(rows["running"]), statistics.median(rows["floor"])
    print(
        f"fault → job running again: median {running:.1f} s over {samples} samples "
        f"(Slurm's own requeue floor {floor:.1f} s, cred_expire=10 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
