"""Diagnose: DCGM diagnostics (`dcgmi diag -r LEVEL -j`) in a privileged Job on the node. Every
test's verdict goes on the timeline; any failing test (or output that is not a report) fails
the step, so no node goes back into service unchecked."""

from __future__ import annotations

from datetime import datetime

from remediator.actions.dcgm import DiagUnreadable, parse_diag
from remediator.actions.jobs import JobSettings, JobState, job_name, render_job, run_job, tail
from remediator.actions.outcome import Done, Failed, Outcome, Waiting
from remediator.kube.client import KubeClient

STEP = "diagnose"


def diag_command(level: int) -> list[str]:
    return ["dcgmi", "diag", "-r", str(level), "-j"]


def diagnose(
    client: KubeClient,
    settings: JobSettings,
    *,
    remediation: str,
    attempt: int,
    node: str,
    level: int,
    started_at: datetime,
    now: datetime,
    timeout_seconds: float,
    poll_seconds: float = 2.0,
) -> Outcome:
    name = job_name(STEP, remediation, attempt)
    job = render_job(
        settings,
        name=name,
        node=node,
        step=STEP,
        remediation=remediation,
        command=diag_command(level),
    )
    run = run_job(client, settings, job)
    facts: dict[str, object] = {"node": node, "level": level, "job": name}
    if run.state is JobState.RUNNING:
        if (now - started_at).total_seconds() > timeout_seconds:
            return Failed(
                f"DCGM diagnostics on {node} did not finish within {timeout_seconds:.0f}s", facts
            )
        return Waiting(f"DCGM level {level} diagnostics running on {node}", poll_seconds, facts)
    facts["exit_code"] = run.exit_code
    try:
        report = parse_diag(run.log)
    except DiagUnreadable as exc:
        facts["log"] = tail(run.log)
        return Failed(f"DCGM diagnostics on {node} gave no report: {exc}", facts)
    facts["tests"] = [v.to_json() for v in report.verdicts]
    facts["dcgm_version"] = report.version
    facts["driver"] = report.driver
    if report.failures:
        named = sorted(
            {
                f"{v.test}" + (f" on GPU {v.gpu}" if v.gpu is not None else "")
                for v in report.failures
            }
        )
        return Failed(f"DCGM level {level} diagnostics failed on {node}: {'; '.join(named)}", facts)
    if run.state is JobState.FAILED:
        return Failed(f"dcgmi on {node} exited {run.exit_code} without a failing test", facts)
    return Done(
        f"DCGM level {level} diagnostics passed on {node} ({len(report.verdicts)} results)", facts
    )
