"""Checkpoint: the one grace, every workload gets its notice (see actions/checkpoint.py)."""

from __future__ import annotations

from remediator.actions.checkpoint import give_notice, plan_grace
from remediator.actions.outcome import Done, Outcome
from remediator.policy.ladder import LadderStep, parse_ladder
from remediator.remediation.steps import gang
from remediator.remediation.steps.context import StepContext
from remediator.remediation.steps.grace import (
    DEFAULT_GRACE_SECONDS,
    DEFAULT_MIN_GRACE_SECONDS,
    capacity_refused,
    grace_bounds,
    with_slurm_jobs,
)
from remediator.store.records import RemediationRecord


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    return with_slurm_jobs(record, step, ctx, lambda: _pods(record, ctx))


def _pods(record: RemediationRecord, ctx: StepContext) -> Outcome:
    bounds = grace_bounds(parse_ladder(record.ladder))
    low, high = bounds or (DEFAULT_MIN_GRACE_SECONDS, DEFAULT_GRACE_SECONDS)
    started = ctx.entered(record)
    now = ctx.clock.now()
    if record.dry_run:
        plan = plan_grace(ctx.kube.list_pods_on_node(record.node), started, now, low, high)
        return Done(
            f"dry run: would ask {len(plan.saving)} workload(s) to checkpoint and evict "
            f"{len(plan.evict)} within a grace of {low:.0f} to {high:.0f}s",
            {
                "node": record.node,
                "would_ask": list(plan.saving),
                "would_evict": sorted(p.key for p, _ in plan.evict),
                "dry_run": True,
            },
        )
    refused = capacity_refused(record, ctx)
    if refused is not None:
        return refused
    outcome = give_notice(
        ctx.kube,
        ctx.drainer,
        record.node,
        started_at=started,
        min_grace=low,
        max_grace=high,
        now=now,
    )
    return gang.notify_gang(record, ctx, low, high, outcome)
