"""What the checkpoint and drain steps share: the grace bounds, the Slurm jobs vacated side by
side with the pods, and the spare-capacity check before the first eviction."""

from __future__ import annotations

from collections.abc import Callable

from remediator.actions.checkpoint import rest_of_clock
from remediator.actions.outcome import Done, Held, Outcome, Waiting
from remediator.actions.replace import check_capacity
from remediator.kube.objects import Pod
from remediator.model.states import State
from remediator.policy.ladder import LadderStep, parse_ladder
from remediator.remediation import planner
from remediator.remediation.journal import entered_at
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext
from remediator.slurm.engine import both, together
from remediator.store.records import RemediationRecord

DEFAULT_GRACE_SECONDS = 120.0
DEFAULT_MIN_GRACE_SECONDS = 30.0
# How often a released capacity hold looks for a spare node again.
CAPACITY_POLL_SECONDS = 5.0


def grace_bounds(ladder: tuple[LadderStep, ...]) -> tuple[float, float] | None:
    """(min_grace, max_grace) of the ladder's grace step; None when it has none."""
    step = planner.step_of(ladder, "checkpoint")
    if step is None:
        return None
    top = step.grace_seconds if step.grace_seconds is not None else DEFAULT_GRACE_SECONDS
    floor = step.min_grace_seconds
    return (min(DEFAULT_MIN_GRACE_SECONDS, top) if floor is None else floor), top


def released_into_current(record: RemediationRecord) -> bool:
    """The remediation entered its current state by a human's release."""
    moves = [e for e in record.events if e.to_state is not None]
    return bool(moves) and moves[-1].action == "released" and moves[-1].to_state is record.state


def opt_out_released(record: RemediationRecord) -> bool:
    """On-call released the remediation's opt-out hold: the opted-out workloads go the way of
    the others from then on (the Slurm jobs' fates are decided before the node goes down)."""
    return any(
        e.from_state is State.HELD_BY_OPT_OUT and e.action == "released" for e in record.events
    )


def capacity_refused(record: RemediationRecord, ctx: StepContext) -> Outcome | None:
    """Before the first eviction (the grace step's, else the drain's): draining a node that
    nobody can replace only loses work. Checked once per entry into that step."""
    if domain.is_rack(record):
        return None  # a rack's repair or replacement takes no node from the pool's spares
    ladder = parse_ladder(record.ladder)
    first = State.CHECKPOINTING if planner.step_of(ladder, "checkpoint") else State.DRAINING
    replaces = planner.step_of(ladder, "replace") is not None
    if record.state is not first or not replaces or not record.pool:
        return None
    checked = (record.id, entered_at(record, first))
    if checked in ctx.capacity_checked:
        return None
    capacity = check_capacity(ctx.provider, record.pool)
    if isinstance(capacity, Held) and released_into_current(record):
        # On-call released the capacity hold: wait for a spare node instead of bouncing
        # straight back into the hold the human just lifted.
        reason = f"{capacity.reason}; released by on-call: waiting for a spare node"
        return Waiting(reason, CAPACITY_POLL_SECONDS, capacity.facts)
    if not isinstance(capacity, Done):
        return capacity
    ctx.capacity_checked.add(checked)
    return None


def rest_of_grace(record: RemediationRecord, ctx: StepContext) -> Callable[[Pod], int] | None:
    """After a grace step, the drain continues each pod's clock from that step's start
    instead of granting a second grace."""
    bounds = grace_bounds(parse_ladder(record.ladder))
    if bounds is None:
        return None
    started, now = entered_at(record, State.CHECKPOINTING), ctx.clock.now()
    return lambda pod: rest_of_clock(pod, started, now, *bounds)


def with_slurm_jobs(
    record: RemediationRecord,
    step: LadderStep,
    ctx: StepContext,
    kube_side: Callable[[], Outcome],
) -> Outcome:
    """The node's Slurm jobs are signalled and requeued within the step's grace, side by
    side with the pods' checkpoints; at the drain (when the ladder has no checkpoint) the
    jobs go first."""
    slurm = ctx.slurm_for(record)
    if slurm is None:
        return kube_side()
    grace = step.grace_seconds if step.grace_seconds is not None else DEFAULT_GRACE_SECONDS
    state = State.CHECKPOINTING if step.action == "checkpoint" else State.DRAINING
    # A clique or domain remediation vacates the Slurm jobs across all its trays as one.
    trays = domain.members(record, ctx)
    jobs = slurm.vacate(
        record,
        entered_at(record, state),
        grace,
        ctx.clock.now(),
        trays,
        overridden=opt_out_released(record),
    )
    if step.action == "checkpoint":
        return together(kube_side(), jobs)
    return both(jobs, kube_side)
