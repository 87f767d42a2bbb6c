"""Reset GPU: `nvidia-smi --gpu-reset` of the faulty GPU(s) in a Job on the node."""

from __future__ import annotations

from remediator.actions.outcome import Done, Outcome
from remediator.actions.reset_gpu import reset_gpus
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps.context import StepContext, attempt_of, faulty_gpus
from remediator.store.records import RemediationRecord

DEFAULT_RESET_TIMEOUT = 300.0


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    gpus = faulty_gpus(record)
    if record.dry_run:
        return Done(f"dry run: would reset GPU {gpus} of {record.node}", {"dry_run": True})
    return reset_gpus(
        ctx.kube,
        ctx.jobs,
        remediation=str(record.id),
        attempt=attempt_of(record, "reset_gpu"),
        node=record.node,
        gpus=gpus,
        started_at=ctx.entered(record),
        now=ctx.clock.now(),
        timeout_seconds=step.timeout_seconds or DEFAULT_RESET_TIMEOUT,
        poll_seconds=ctx.repair_poll,
    )
