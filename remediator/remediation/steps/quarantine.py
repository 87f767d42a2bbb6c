"""Quarantine: cordon and taint the node (and drain it in Slurm, when enabled). The opt-out check
that follows belongs to the service, which owns the opt-out hold."""

from __future__ import annotations

from functools import partial

from remediator.actions.outcome import Outcome
from remediator.actions.quarantine import Why, quarantine
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps.context import StepContext, signal_text
from remediator.slurm.engine import both
from remediator.store.records import RemediationRecord


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    why = Why(str(record.id), record.policy, signal_text(record))
    outcome = quarantine(ctx.kube, record.node, why, dry_run=record.dry_run)
    fence = ctx.slurm_for(record)
    if fence is not None:
        outcome = both(outcome, partial(fence.quarantine, record))
    return outcome
