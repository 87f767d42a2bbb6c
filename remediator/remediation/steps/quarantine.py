"""Quarantine: cordon and taint the node (and drain it in Slurm, when enabled). The opt-out check
that follows belongs to the service, which owns the opt-out hold."""

from __future__ import annotations

from functools import partial

from remediator.actions.outcome import Done, Outcome
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext, signal_text
from remediator.slurm.engine import both
from remediator.store.records import RemediationRecord


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    why = ctx.why(record, signal_text(record))
    outcome = ctx.fences.fence(record.node, why, dry_run=record.dry_run)
    trays = domain.members(record, ctx)
    if len(trays) > 1 and isinstance(outcome, Done):
        # A clique or domain is fenced together, in this one remediation (docs/topology.md).
        for tray in trays[1:]:
            fenced = ctx.fences.fence(tray, why, dry_run=record.dry_run)
            if not isinstance(fenced, Done):
                return fenced
        outcome = Done(
            f"{outcome.detail}; and the {len(trays) - 1} other tray(s) of its unit",
            {**outcome.facts, "trays": list(trays)},
        )
    fence = ctx.slurm_for(record)
    if fence is not None:
        outcome = both(outcome, partial(fence.quarantine, record, trays))
    return outcome
