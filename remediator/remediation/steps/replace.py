"""Replace: ask the node pool for a new node (Slurm first lets go of the old one)."""

from __future__ import annotations

from remediator.actions.outcome import Done, Failed, Outcome
from remediator.actions.replace import replace_node
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps.context import StepContext, replaced_node, replacement_key
from remediator.slurm.engine import both
from remediator.store.records import RemediationRecord


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    slurm = ctx.slurm_for(record)
    if slurm is None:
        return _replace(record, ctx)
    return both(slurm.before_replace(record), lambda: _replace(record, ctx))


def _replace(record: RemediationRecord, ctx: StepContext) -> Outcome:
    node = replaced_node(record)
    if record.pool is None:
        return Failed(f"node {node} belongs to no node pool: nothing can replace it")
    if record.dry_run:
        return Done(
            f"dry run: would ask node pool {record.pool} to replace {node}",
            {"pool": record.pool, "node": node, "dry_run": True},
        )
    return replace_node(
        ctx.provider,
        pool=record.pool,
        node=node,
        idempotency_key=replacement_key(record),
        reason=record.reason,
        started_at=ctx.entered(record),
        now=ctx.clock.now(),
        operation_id=record.replacement_operation_id,
    )
