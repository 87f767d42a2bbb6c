"""Drain: evict what is left on the node, continuing a checkpoint step's clock."""

from __future__ import annotations

from remediator.actions.drain import OnTimeout
from remediator.actions.outcome import Done, Outcome
from remediator.actions.pods import movable
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext
from remediator.remediation.steps.grace import (
    DEFAULT_GRACE_SECONDS,
    capacity_refused,
    rest_of_grace,
    with_slurm_jobs,
)
from remediator.store.records import RemediationRecord

DEFAULT_DRAIN_TIMEOUT = 600.0


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    return with_slurm_jobs(record, step, ctx, lambda: _pods(record, step, ctx))


def _pods(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    grace = step.grace_seconds if step.grace_seconds is not None else DEFAULT_GRACE_SECONDS
    if record.dry_run:
        pods = movable(ctx.kube.list_pods_on_node(record.node))
        return Done(
            f"dry run: would evict {len(pods)} pod(s) with a {grace:.0f}s grace period",
            {"node": record.node, "would_evict": sorted(p.key for p in pods), "dry_run": True},
        )
    refused = capacity_refused(record, ctx)
    if refused is not None:
        return refused
    # A rack is repaired or replaced whole: every tray of it is drained first.
    trays = domain.members(record, ctx) if domain.is_rack(record) else (record.node,)
    outcomes = [
        ctx.drainer.drain(
            tray,
            started_at=ctx.entered(record),
            grace_seconds=int(grace),
            timeout_seconds=step.timeout_seconds or DEFAULT_DRAIN_TIMEOUT,
            on_timeout=OnTimeout(step.on_timeout or OnTimeout.HOLD.value),
            grace_for=rest_of_grace(record, ctx),
        )
        for tray in trays
    ]
    return domain.all_trays(trays, outcomes)
