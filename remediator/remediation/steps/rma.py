"""RMA: open a case for the owned GPU (or machine) at fault with its evidence bundle, and post it
to the ticket system's webhook. The case is kept whether the webhook takes it or not: a failed
delivery is a line on the timeline and is retried by the controller until it is taken, so the
ladder goes on (a replacement, or the fenced node waiting for a human) either way.

Idempotent: the hardware's case that is not closed yet is reused, so a crash after the open, a
second remediation of the same GPU or a retried step never opens a second case."""

from __future__ import annotations

from datetime import timedelta

from remediator.actions.outcome import Done, Failed, Outcome
from remediator.errors import NotFoundError
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps.context import StepContext, signal_text
from remediator.rma import bundle
from remediator.rma.book import NewCase, RmaBook
from remediator.rma.model import RmaCase, Target
from remediator.rma.webhook import FailureNote
from remediator.store.records import RemediationRecord

# Earlier remediations of the node searched for this GPU's or machine's timelines.
HISTORY_LIMIT = 100


def book_of(ctx: StepContext) -> RmaBook:
    return RmaBook(ctx.repo.session_factory, ctx.repo.cluster, ctx.clock)


def gpu_at_fault(record: RemediationRecord) -> tuple[str | None, int | None]:
    """The faulty GPU's UUID and index from the remediation's signals (the first that names
    one); None when no signal carried a UUID."""
    for signal in record.signals:
        if signal.gpu_uuid:
            return signal.gpu_uuid, signal.gpu
    index = next((s.gpu for s in record.signals if s.gpu is not None), None)
    return None, index


def machine_id(record: RemediationRecord, ctx: StepContext) -> str:
    """The ledger's machine (instance id or DMI serial); else the cloud's instance id (the
    Node's providerID) when the node is still there, else the
    node name: on bare metal without the ledger's DMI serial the name is what is known. A node
    already gone (replaced) answers 404; anything else is retried by the service."""
    known = ctx.hardware.machine_of(record.node) if ctx.hardware is not None else None
    if known:
        return known
    try:
        provider_id = ctx.kube.get_node(record.node).provider_id
    except NotFoundError:
        provider_id = ""
    return provider_id or record.node


def _remediations(
    record: RemediationRecord, ctx: StepContext, target: Target, hardware_id: str
) -> list[RemediationRecord]:
    """This remediation, and the others the ledger links to the hardware (else the node's
    earlier ones that concern it)."""
    if ctx.hardware is not None:
        ids = set(ctx.hardware.remediation_ids(target, hardware_id)) - {record.id}
        others = [ctx.repo.get(i) for i in sorted(ids)]
        return [record, *(r for r in others if r is not None)]
    earlier = ctx.repo.node_history(record.node, limit=HISTORY_LIMIT).remediations
    related = [
        r
        for r in earlier
        if r.id != record.id
        and (target is Target.MACHINE or any(s.gpu_uuid == hardware_id for s in r.signals))
    ]
    return [record, *ctx.repo.with_events(related)]


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    target = Target(step.target or Target.GPU.value)
    uuid, index = gpu_at_fault(record)
    if target is Target.GPU and uuid is None:
        return Failed(
            "rma: no signal of this remediation names the GPU's UUID, so the GPU to send back is "
            "not known; open the case by hand or use `target: machine`"
        )
    hardware_id = uuid if target is Target.GPU and uuid else machine_id(record, ctx)
    if record.dry_run:
        return Done(
            f"dry run: would open an RMA case for {target.value} {hardware_id}",
            {"dry_run": True, "hardware_id": hardware_id},
        )
    book = book_of(ctx)
    existing = book.open_case_of(hardware_id)
    if existing is not None:
        return _done(existing, created=False)
    reason = step.message or signal_text(record)
    known = (
        ctx.hardware.hardware(target, hardware_id)
        if ctx.hardware is not None
        else bundle.Hardware()
    )
    case_facts = {
        "target": target.value,
        "hardware_id": hardware_id,
        "cluster": record.cluster,
        "node": record.node,
        "pool": record.pool,
        "gpu_index": index,
        "remediation_id": record.id,
        "policy": record.policy,
        "reason": reason,
    }
    evidence = bundle.build(
        case=case_facts,
        hardware=known,
        remediations=_remediations(record, ctx, target, hardware_id),
        gpu_index=index if target is Target.GPU else None,
        built_at=ctx.clock.now(),
    )
    new = NewCase(target, hardware_id, record.node, index, record.id, reason)
    case, created = book.open(new, evidence, webhook=ctx.rma_webhook is not None, actor=ctx.actor)
    if created and ctx.rma_webhook is not None:
        ctx.rma_webhook.deliver_due(book, note=failure_note(ctx))
        case = book.get(case.id)
    return _done(case, created=created)


def failure_note(ctx: StepContext) -> FailureNote:
    """Each failed delivery as a line on the case's remediation timeline."""

    def note(case: RmaCase, error: str, retry_in: timedelta) -> None:
        if case.remediation_id is None:
            return
        ctx.repo.append_event(
            case.remediation_id,
            action="rma_webhook_failed",
            actor=ctx.actor,
            detail={
                "case": case.id,
                "error": error,
                "attempt": case.webhook_attempts,
                "retry_in_seconds": retry_in.total_seconds(),
            },
        )

    return note


def _done(case: RmaCase, *, created: bool) -> Done:
    verb = "opened" if created else "already open"
    return Done(
        f"RMA case {case.id} {verb} for {case.target.value} {case.hardware_id}",
        {
            "rma_case": case.id,
            "hardware_id": case.hardware_id,
            "status": case.status.value,
            "created": created,
            "webhook": case.webhook_state,
        },
    )
