"""Reboot: record the boot id, then ask (idempotently); afterwards only wait for a new boot id.
A restart finds the request on the timeline and never asks for a second reboot."""

from __future__ import annotations

from datetime import timedelta

from remediator.actions.outcome import Done, Failed, Outcome
from remediator.actions.reboot import current_node, judge_reboot, request_reboot
from remediator.policy.ladder import LadderStep
from remediator.remediation.planned import maintenance_event
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext, attempt_of, reboot_request
from remediator.store.records import EventRecord, RemediationRecord

DEFAULT_REBOOT_TIMEOUT = 900.0


def machine_now(ctx: StepContext, node: str) -> str | None:
    """The machine behind the node as the ledger knows it (None without a ledger)."""
    return ctx.hardware.machine_of(node) if ctx.hardware is not None else None


def reboots_within(ctx: StepContext, node: str, seconds: float) -> int:
    """Reboots asked for of the machine now behind this node (by any remediation) within the
    last `seconds`. A machine is its hardware: a reboot of the tray a replacement took out of
    the slot is not this one's. A reboot whose line names no machine (the ledger did not know
    it) counts by the node's name, as does every reboot when the machine now is unknown."""
    since = ctx.clock.now() - timedelta(seconds=seconds)
    machine = machine_now(ctx, node)
    count = 0
    for past in ctx.repo.node_history(node).remediations:
        if past.updated_at < since:
            continue
        full = ctx.repo.get(past.id)
        events = full.events if full is not None else ()
        count += sum(
            1
            for e in events
            if e.action == "reboot_requested"
            and e.at >= since
            and (machine is None or e.detail.get("machine") in (None, machine))
        )
    return count


def reboot_accepted(record: RemediationRecord, requested: EventRecord) -> bool:
    return any(e.action == "reboot_accepted" and e.at >= requested.at for e in record.events)


def spare_left_running(record: RemediationRecord, ctx: StepContext) -> Outcome | None:
    """Before the reboot (or the rack's repair) is asked for: a Slurm job the timeline says was
    left running would die with it, so the step waits instead (None: nothing in the way)."""
    slurm = ctx.slurm_for(record)
    if slurm is None:
        return None
    rack = domain.is_rack(record)
    if (domain.rack_request(record, ctx) if rack else reboot_request(record)) is not None:
        return None
    guard = slurm.before_reboot(record, domain.members(record, ctx) if rack else ())
    return None if isinstance(guard, Done) else guard


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    spared = spare_left_running(record, ctx)
    if spared is not None:
        return spared
    if domain.is_rack(record):
        # A domain's reboot is its rack's repair: switches mended, every tray power-cycled.
        return domain.rack_operation(record, ctx, "repair", step.timeout_seconds)
    if record.dry_run:
        return Done(f"dry run: would reboot {record.node}", {"dry_run": True})
    attempt = attempt_of(record, "reboot")
    requested = reboot_request(record)
    if requested is None:
        if step.limit is not None and step.window_seconds is not None:
            done = reboots_within(ctx, record.node, step.window_seconds)
            if done >= step.limit:
                hours = step.window_seconds / 3600
                machine = machine_now(ctx, record.node)
                which = f" (machine {machine})" if machine is not None else ""
                return Failed(
                    f"{record.node}{which} was rebooted {done} times within {hours:g}h "
                    f"(at most {step.limit}): no reboot loops",
                    {"node": record.node, "machine": machine, "reboots": done, "limit": step.limit},
                )
        node = ctx.kube.get_node(record.node)
        ctx.repo.append_event(
            record.id,
            action="reboot_requested",
            actor=ctx.actor,
            detail={
                "node": record.node,
                "boot_id": node.boot_id,
                "attempt": attempt,
                "machine": machine_now(ctx, record.node),
            },
        )
        record = ctx.repo.get(record.id) or record
        requested = reboot_request(record)
        assert requested is not None
    if not reboot_accepted(record, requested):
        how = request_reboot(
            ctx.provider,
            ctx.kube,
            ctx.jobs,
            pool=record.pool,
            node=record.node,
            key=f"{record.idempotency_key}-reboot-{attempt}",
            reason=record.reason,
            remediation=str(record.id),
            attempt=attempt,
            maintenance=maintenance_event(record) if step.via == "maintenance" else None,
        )
        ctx.repo.append_event(record.id, action="reboot_accepted", actor=ctx.actor, detail=how)
    return judge_reboot(
        current_node(ctx.kube, record.node),
        name=record.node,
        boot_id_before=str(requested.detail.get("boot_id") or ""),
        started_at=requested.at,
        now=ctx.clock.now(),
        timeout_seconds=step.timeout_seconds or DEFAULT_REBOOT_TIMEOUT,
        poll_seconds=ctx.repair_poll,
    )
