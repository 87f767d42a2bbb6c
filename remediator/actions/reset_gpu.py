"""Reset GPU: `nvidia-smi --gpu-reset -i N` for each faulty GPU only, one privileged Job per GPU
pinned to the node. It runs after a full drain (the ladder requires `drain` before it): a reset
fails while any process holds the GPU, and a partial drain of the pods using that GPU would need
the device plugin's allocations, which the API does not show."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from remediator.actions.jobs import JobSettings, JobState, job_name, render_job, run_job, tail
from remediator.actions.outcome import Done, Failed, Outcome, Waiting
from remediator.kube.client import KubeClient

STEP = "reset_gpu"


def reset_command(gpu: int) -> list[str]:
    return ["nvidia-smi", "--gpu-reset", "-i", str(gpu)]


def reset_gpus(
    client: KubeClient,
    settings: JobSettings,
    *,
    remediation: str,
    attempt: int,
    node: str,
    gpus: Sequence[int],
    started_at: datetime,
    now: datetime,
    timeout_seconds: float,
    poll_seconds: float = 2.0,
) -> Outcome:
    targets = sorted(set(gpus))
    if not targets:
        return Failed(f"no GPU of {node} is named by the signal: nothing to reset", {"node": node})
    facts: dict[str, object] = {"node": node, "gpus": targets}
    results: dict[str, dict[str, object]] = {}
    running = []
    for gpu in targets:
        name = job_name(STEP, remediation, attempt, f"gpu{gpu}")
        job = render_job(
            settings,
            name=name,
            node=node,
            step=STEP,
            remediation=remediation,
            command=reset_command(gpu),
        )
        run = run_job(client, settings, job)
        results[str(gpu)] = {"job": name, "state": run.state.value, "exit_code": run.exit_code}
        if run.log:
            results[str(gpu)]["log"] = tail(run.log.strip(), 500)
        if run.state is JobState.RUNNING:
            running.append(gpu)
    facts["results"] = results
    failed = [g for g in targets if results[str(g)]["state"] == JobState.FAILED.value]
    listed = ", ".join(str(g) for g in targets)
    if failed:
        first = results[str(failed[0])]
        return Failed(
            f"GPU reset failed on {node} GPU {', '.join(str(g) for g in failed)} "
            f"(exit code {first['exit_code']}): {first.get('log', 'no output')}",
            facts,
        )
    if not running:
        return Done(f"reset GPU {listed} of {node}", facts)
    elapsed = (now - started_at).total_seconds()
    if elapsed > timeout_seconds:
        return Failed(f"GPU reset on {node} did not finish within {timeout_seconds:.0f}s", facts)
    return Waiting(f"resetting GPU {listed} of {node}", poll_seconds, facts)
