"""Verify: the replacement is Ready and schedulable and the old node has left (and Slurm takes
the new node back)."""

from __future__ import annotations

from remediator.actions.outcome import Done, Failed, Held, Outcome
from remediator.actions.release import release
from remediator.actions.verify import verify_replacement
from remediator.policy.ladder import LadderStep, parse_ladder
from remediator.remediation import planner
from remediator.remediation.steps.context import StepContext, replaced_node
from remediator.slurm.engine import both
from remediator.store.records import RemediationRecord


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    slurm = ctx.slurm_for(record)
    if slurm is None:
        return _verify(record, ctx)
    return both(_verify(record, ctx), lambda: slurm.after_verify(record))


def _verify(record: RemediationRecord, ctx: StepContext) -> Outcome:
    if record.dry_run:
        return Done("dry run: nothing was changed, nothing to verify", {"dry_run": True})
    if not record.new_node:
        return Failed("the replacement named no new node to verify")
    held = ctx.machine_hold(record.new_node)
    if held is not None:
        return Held(held, {"node": record.new_node, "machine_hold": True})
    if planner.validates(parse_ladder(record.ladder)):
        # It passed its validation fenced: only now does it take work.
        lifted = release(ctx.kube, record.new_node, str(record.id))
        if not isinstance(lifted, Done):
            return lifted
    return verify_replacement(
        ctx.kube,
        old_node=replaced_node(record),
        new_node=record.new_node,
        started_at=ctx.entered(record),
        now=ctx.clock.now(),
    )
