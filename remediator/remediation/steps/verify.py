"""Verify: the replacement is Ready and schedulable and the old node has left (and Slurm takes
the new node back)."""

from __future__ import annotations

from remediator.actions.outcome import Done, Failed, Held, Outcome, Waiting
from remediator.actions.verify import POLL_SECONDS, node_problems, verify_replacement
from remediator.errors import NotFoundError
from remediator.policy.ladder import LadderStep, parse_ladder
from remediator.remediation import planner
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext, replaced_node
from remediator.slurm.engine import both
from remediator.store.records import RemediationRecord

RACK_VERIFY_TIMEOUT = 600.0


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    slurm = ctx.slurm_for(record)
    if slurm is None:
        return _verify(record, ctx)
    return both(_verify(record, ctx), lambda: slurm.after_verify(record, domain.rack_trays(record)))


def _verify(record: RemediationRecord, ctx: StepContext) -> Outcome:
    if record.dry_run:
        return Done("dry run: nothing was changed, nothing to verify", {"dry_run": True})
    trays = domain.rack_trays(record)
    if trays:
        return _verify_rack(record, ctx, trays)
    if not record.new_node:
        return Failed("the replacement named no new node to verify")
    held = ctx.machine_hold(record.new_node)
    if held is not None:
        return Held(held, {"node": record.new_node, "machine_hold": True})
    if planner.validates(parse_ladder(record.ladder)):
        # It passed its validation fenced: only now does it take work.
        lifted = ctx.fences.unfence(record.new_node, str(record.id))
        if not isinstance(lifted, Done):
            return lifted
    return verify_replacement(
        ctx.kube,
        old_node=replaced_node(record),
        new_node=record.new_node,
        started_at=ctx.entered(record),
        now=ctx.clock.now(),
    )


def _verify_rack(record: RemediationRecord, ctx: StepContext, trays: tuple[str, ...]) -> Outcome:
    """A rack replaced or repaired as one: every tray of it at its slot, Ready and in service
    (the trays back as their rack's spares included, labelled and tainted so on purpose). A
    replaced rack whose trays were validated fenced takes work only now, all trays together."""
    if planner.validates(parse_ladder(record.ladder)):
        returned = domain.return_trays(record, ctx, trays)
        if not isinstance(returned, Done):
            return returned
    problems: list[str] = []
    for tray in trays:
        try:
            found = ctx.kube.get_node(tray)
        except NotFoundError:
            found = None
        problems.extend(node_problems(found, tray))
    facts: dict[str, object] = {"trays": list(trays)}
    if not problems:
        return Done(f"the rack's {len(trays)} trays are Ready and in service", facts)
    facts["problems"] = problems
    waited = (ctx.clock.now() - ctx.entered(record)).total_seconds()
    if waited > RACK_VERIFY_TIMEOUT:
        return Failed(f"rack not in service after {waited:.0f}s: {'; '.join(problems[:5])}", facts)
    return Waiting(f"{len(problems)} problem(s) left, e.g. {problems[0]}", POLL_SECONDS, facts)
