"""`remediator demo --slurm`: checkpointing Slurm jobs for remediator to look after. Each traps
SIGTERM, writes its checkpoint and ends; started again (after a requeue) it resumes from the
checkpoint and runs on, so the console's timeline and `squeue` show the whole flow."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
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


def slurm_banner(slurm: Mapping[str, Any] | None, directory: Path) -> list[str]:
    if not slurm:
        return []
    conf = slurm["slurm_conf"]
    return [
        f"  slurm     SLURM_CONF={conf} squeue; SLURM_CONF={conf} sinfo -N -o '%N %T %E'",
        f"            jobs' logs and checkpoints: {directory}/log.JOBID, ckpt.JOBID",
    ]
