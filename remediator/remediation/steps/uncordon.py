"""Uncordon: a repaired node goes back into service (and back to Slurm, if the drain was ours)."""

from __future__ import annotations

from remediator.actions.outcome import Done, Held, Outcome
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext
from remediator.slurm.engine import both
from remediator.store.records import RemediationRecord


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    if record.dry_run:
        return Done("dry run: nothing was fenced, nothing to return", {"dry_run": True})
    trays = domain.rack_trays(record)
    for node in trays or (record.node,):
        held = ctx.machine_hold(node)
        if held is not None:
            return Held(held, {"node": node, "machine_hold": True})
    # A repaired rack goes back whole.
    back = (
        domain.return_trays(record, ctx, trays)
        if trays
        else ctx.fences.unfence(record.node, str(record.id))
    )
    returning = ctx.slurm_for(record)
    if returning is None:
        return back
    return both(back, lambda: returning.after_verify(record, trays))
