"""Diagnose: DCGM diagnostics at the ladder step's level in a Job on the node."""

from __future__ import annotations

from remediator.actions.diagnose import diagnose
from remediator.actions.outcome import Done, Outcome
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps.context import StepContext, attempt_of
from remediator.store.records import RemediationRecord

DEFAULT_DIAG_TIMEOUT = 1800.0
DEFAULT_DIAG_LEVEL = 2


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    level = step.level or DEFAULT_DIAG_LEVEL
    if record.dry_run:
        return Done(f"dry run: would run DCGM level {level} diagnostics", {"dry_run": True})
    return diagnose(
        ctx.kube,
        ctx.jobs,
        remediation=str(record.id),
        attempt=attempt_of(record, "diagnose"),
        node=record.node,
        level=level,
        started_at=ctx.entered(record),
        now=ctx.clock.now(),
        timeout_seconds=step.timeout_seconds or DEFAULT_DIAG_TIMEOUT,
        poll_seconds=ctx.repair_poll,
    )
