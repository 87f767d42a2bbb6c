"""Replace: ask the node pool for a new node (Slurm first lets go of the old one)."""

from __future__ import annotations

from datetime import datetime

from remediator.actions.outcome import Done, Failed, Outcome, Waiting
from remediator.actions.quarantine import ANN_REMEDIATION_ID
from remediator.actions.replace import replace_node
from remediator.errors import NotFoundError
from remediator.policy.ladder import LadderStep, parse_ladder
from remediator.remediation import planner
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext, replaced_node, replacement_key
from remediator.slurm.engine import both
from remediator.store.records import RemediationRecord


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    slurm = ctx.slurm_for(record)
    if domain.is_rack(record):
        # A domain is replaced as its rack, in one node-pool operation (steps/domain.py).
        def work() -> Outcome:
            return domain.rack_operation(record, ctx, "replace", step.timeout_seconds)
    else:

        def work() -> Outcome:
            return _replace(record, ctx)

    if slurm is None:
        return work()
    trays = domain.members(record, ctx) if domain.is_rack(record) else ()
    return both(slurm.before_replace(record, trays), work)


def _replace(record: RemediationRecord, ctx: StepContext) -> Outcome:
    node = replaced_node(record)
    if record.pool is None:
        return Failed(f"node {node} belongs to no node pool: nothing can replace it")
    if record.dry_run:
        return Done(
            f"dry run: would ask node pool {record.pool} to replace {node}",
            {"pool": record.pool, "node": node, "dry_run": True},
        )
    outcome = replace_node(
        ctx.provider,
        pool=record.pool,
        node=node,
        idempotency_key=replacement_key(record),
        reason=record.reason,
        started_at=asked_since(record, ctx.entered(record), ctx.clock.now()),
        now=ctx.clock.now(),
        operation_id=record.replacement_operation_id,
    )
    new_node = outcome.facts.get("new_node") if isinstance(outcome, Done | Waiting) else None
    if new_node and new_node != node and planner.validates(parse_ladder(record.ladder)):
        _fence_on_arrival(record, ctx, str(new_node))
    return outcome


def asked_since(record: RemediationRecord, entered: datetime, now: datetime) -> datetime:
    """When the replacement was asked for, which its timeout counts from: the step's start,
    unless a hold kept it from asking (a paused Cluster, an unreachable slurmctld: `holding`
    progress lines); then the first line after the last that held, or `now` while that one is
    the last (the request goes out on this look)."""
    lines = [e for e in record.events if e.action == "progress" and e.at >= entered]
    held = [i for i, e in enumerate(lines) if e.detail.get("holding")]
    if not held:
        return entered
    after = lines[held[-1] + 1 :]
    return after[0].at if after else now


def _fence_on_arrival(record: RemediationRecord, ctx: StepContext, new_node: str) -> None:
    """A machine that is to be validated is fenced the moment it is known, not one step later:
    the pods the drain evicted are waiting for somewhere to run."""
    try:
        found = ctx.kube.get_node(new_node)
    except NotFoundError:
        return
    if found.unschedulable and found.annotations.get(ANN_REMEDIATION_ID):
        return
    ctx.fences.fence(new_node, ctx.why(record, f"validating {new_node}"))
