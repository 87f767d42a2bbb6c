"""`remediator demo --slurm`: checkpointing Slurm jobs for remediator to look after. Each traps
SIGTERM, writes its checkpoint and ends; started again (after a requeue) it resumes from the
checkpoint and runs on, so the console's timeline and `squeue` show the whole flow."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

JOB = """#!/bin/bash
dir={dir}
ck="$dir/ckpt.$SLURM_JOB_ID"
log="$dir/log.$SLURM_JOB_ID"
if [ -f "$ck" ]; then
    echo "$(date +%T) resumed $(cat "$ck") on $SLURMD_NODENAME" >> "$log"
else
    echo "$(date +%T) started on $SLURMD_NODENAME" >> "$log"
fi
checkpoint() {{
    echo "step-$SECONDS from $SLURMD_NODENAME" > "$ck"
    echo "$(date +%T) SIGTERM: checkpointed on $SLURMD_NODENAME" >> "$log"
    exit 0
}}
trap checkpoint TERM
sleep 86400 &
wait
"""


def submit_demo_jobs(slurm: Mapping[str, Any], directory: Path, nodes: int) -> list[int]:
    """One requeueable job per two nodes (at most 8); their job ids."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "train.sh"
    script.write_text(JOB.format(dir=directory))
    script.chmod(0o755)
    env = {**os.environ, "SLURM_CONF": str(slurm["slurm_conf"])}
    ids = []
    for _ in range(min(8, max(1, nodes // 2))):
        done = subprocess.run(
            ["sbatch", "--parsable", "--requeue", "-o", f"{directory}/out-%j", str(script)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        ids.append(int(done.stdout.strip().split(";")[0]))
    return ids


def running_jobs(slurm: Mapping[str, Any]) -> dict[str, str]:
    """Slurm node → the job running there (the demo's jobs run on one node each); empty when
    Slurm does not answer."""
    env = {**os.environ, "SLURM_CONF": str(slurm["slurm_conf"])}
    try:
        done = subprocess.run(
            ["squeue", "-h", "-t", "RUNNING", "-o", "%i %N"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return {}
    jobs: dict[str, str] = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else ():
        parts = line.split()
        if len(parts) == 2:
            jobs.setdefault(parts[1], parts[0])
    return jobs


def slurm_banner(
    slurm: Mapping[str, Any] | None, directory: Path, jobs: Sequence[int]
) -> list[str]:
    if not slurm:
        return []
    conf = slurm["slurm_conf"]
    ids = ",".join(str(j) for j in jobs)
    return [
        f"  slurm     SLURM_CONF={conf} squeue; SLURM_CONF={conf} sinfo -N -o '%N %T %E'",
        f"            checkpointing jobs {ids}: the first fault hits the node of one of them and",
        "            names it; watch it with SLURM_CONF=… squeue -j JOB and in the console's",
        '            "Slurm jobs" table (requeued, then running elsewhere from its checkpoint)',
        f"            jobs' logs and checkpoints: {directory}/log.JOB, ckpt.JOB",
    ]
