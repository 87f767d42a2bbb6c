"""The trays a clique- or domain-scoped remediation holds (policy/scope.py): read back from its
`detected` entry (scope and unit) and the nodes' clique labels now, so that fencing covers every
tray of the unit in this one remediation and no tray of any other. A domain-scoped remediation's
repair and replace steps act on its rack as one node-pool operation (rack_operation)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from remediator.actions.outcome import Done, Failed, Held, Outcome, Waiting
from remediator.errors import NotFoundError, PermanentError
from remediator.kube.objects import Node
from remediator.model.topology import CLIQUE_LABEL, build_topology
from remediator.policy.ladder import parse_ladder
from remediator.providers.base import (
    Operation,
    OperationState,
    ReplacementHeld,
    request_rack_operation,
)
from remediator.remediation import planner
from remediator.remediation.steps.context import StepContext
from remediator.store.records import EventRecord, RemediationRecord

POLL_SECONDS = 2.0


def scope_of(record: RemediationRecord) -> tuple[str, str] | None:
    """(scope, unit) recorded when the remediation was opened; None for a per-node one."""
    for event in record.events:
        scope, unit = event.detail.get("scope"), event.detail.get("domain")
        if scope in ("clique", "domain") and isinstance(unit, str):
            return str(scope), unit
    return None


def members(record: RemediationRecord, ctx: StepContext) -> tuple[str, ...]:
    """Every tray of the remediation's unit, its own node first; just the node when per node."""
    scoped = scope_of(record)
    if scoped is None:
        return (record.node,)
    scope, unit = scoped
    nodes = ctx.kube.list_nodes(label_selector=CLIQUE_LABEL)
    topology = build_topology({n.name: n.labels for n in nodes})
    if scope == "clique":
        found = [n for n, p in topology.placements.items() if p.clique.label == unit]
    else:
        domain = topology.domains.get(unit)
        found = list(domain.nodes) if domain is not None else []
    return (record.node, *sorted(n for n in found if n != record.node))


# -- a rack repaired or replaced as a rack ---------------------------------------------------

RACK_REQUESTED = "rack_operation_requested"
DEFAULT_RACK_TIMEOUT = 1800.0


def is_rack(record: RemediationRecord) -> bool:
    """A domain-scoped remediation acts on its rack as a whole; a clique is part of one."""
    scoped = scope_of(record)
    return scoped is not None and scoped[0] == "domain"


def rack_request(record: RemediationRecord, ctx: StepContext) -> EventRecord | None:
    """The rack operation this step asked for since it was entered: a restart follows it."""
    since = ctx.entered(record)
    for event in reversed(record.events):
        if event.action == RACK_REQUESTED and event.at >= since:
            return event
    return None


def rack_operation(
    record: RemediationRecord, ctx: StepContext, action: str, timeout: float | None = None
) -> Outcome:
    """Ask the node pool to `action` (repair or replace) the remediation's rack as one
    operation, follow it, then check and return its trays together (or, when the ladder
    validates, leave them fenced for the validate step, which returns them).

    The request is written to the timeline with its operation id and the trays' boot ids before
    anything waits on it: a restart follows that operation and never asks for a second one (and
    a crash between the request and the write asks again with the same key, which the provider
    answers with the same operation)."""
    requested = rack_request(record, ctx)
    if requested is None:
        trays = members(record, ctx)
        nodes = {n.name: n for n in ctx.kube.list_nodes(label_selector=CLIQUE_LABEL)}
        place = build_topology({n: node.labels for n, node in nodes.items()}).placement(record.node)
        rack = place.rack if place is not None else None
        if rack is None:
            return Failed(f"{record.node} has no rack label: its rack cannot be {action}ed")
        if record.pool is None:
            return Failed(f"{record.node} belongs to no node pool: nothing can {action} {rack}")
        if record.dry_run:
            return Done(
                f"dry run: would {action} rack {rack} ({len(trays)} trays) in {record.pool}",
                {"rack": rack, "action": action, "trays": list(trays), "dry_run": True},
            )
        attempt = sum(1 for e in record.events if e.action == RACK_REQUESTED)
        try:
            op = request_rack_operation(
                ctx.provider,
                record.pool,
                rack,
                action,
                f"{record.idempotency_key}-rack-{action}-{attempt}",
                record.reason,
            )
        except ReplacementHeld as exc:
            return Held(str(exc), {"rack": rack, "action": action})
        except PermanentError as exc:
            return Failed(f"{action} of rack {rack}: {exc}", {"rack": rack, "action": action})
        boots = {t: nodes[t].boot_id for t in trays if t in nodes}
        detail = {"rack": rack, "action": action, "operation_id": op.id, "trays": list(trays)}
        ctx.repo.append_event(
            record.id, action=RACK_REQUESTED, actor=ctx.actor, detail={**detail, "boots": boots}
        )
    else:
        detail = {k: requested.detail[k] for k in ("rack", "action", "operation_id", "trays")}
        boots = dict(requested.detail.get("boots") or {})
        try:
            op = ctx.provider.get_operation(str(detail["operation_id"]))
        except PermanentError as exc:
            return Failed(f"{detail['action']} of rack {detail['rack']}: {exc}", detail)
    started = requested.at if requested is not None else ctx.clock.now()
    limit = timeout or DEFAULT_RACK_TIMEOUT
    held = [str(t) for t in detail["trays"]]
    if detail["action"] == "replace" and planner.validates(parse_ladder(record.ladder)):
        fenced = fence_arrivals(record, ctx, held)
        if not isinstance(fenced, Done):
            return fenced
    judged = judge_rack(op, str(detail["rack"]), started, ctx.clock.now(), limit)
    if not isinstance(judged, Done):
        return judged
    return _return_trays(record, ctx, held, boots, detail, started, limit)


def judge_rack(
    op: Operation, rack: str, started: datetime, now: datetime, timeout: float
) -> Outcome:
    """Where the provider's rack operation stands (pure)."""
    facts = {"rack": rack, "operation_id": op.id, "state": op.state.value, "error": op.error}
    if op.state is OperationState.SUCCEEDED:
        return Done(f"rack {rack}: operation {op.id} succeeded", facts)
    if op.state is OperationState.FAILED:
        return Failed(f"rack {rack}: operation {op.id} failed: {op.error or 'no reason'}", facts)
    if (now - started).total_seconds() > timeout:
        return Failed(
            f"rack {rack}: operation {op.id} still {op.state.value} after {timeout:.0f}s", facts
        )
    return Waiting(f"rack {rack}: operation {op.id} is {op.state.value}", POLL_SECONDS, facts)


def tray_problems(node: Node | None, name: str, boot_before: str | None) -> list[str]:
    """Why a tray back from its rack's operation is not fit to take work yet (pure): it must be
    there, Ready, advertise its GPUs and run a boot other than the one before the operation."""
    if node is None:
        return [f"{name} has not joined the cluster"]
    problems = []
    if not node.ready:
        problems.append(f"{name} is not Ready")
    if not node.gpus:
        problems.append(f"{name} advertises no GPUs")
    if boot_before and node.boot_id == boot_before:
        problems.append(f"{name} has not rebooted")
    return problems


def _return_trays(
    record: RemediationRecord,
    ctx: StepContext,
    trays: list[str],
    boots: dict[str, str],
    detail: dict[str, Any],
    started: datetime,
    limit: float,
) -> Outcome:
    """Every tray checked first (within the step's `limit` from the request); a replaced rack's
    trays are then returned to service together (new machines: nothing else checks them before
    verify), unless the ladder validates: then they stay fenced until every tray passed."""
    nodes = {n.name: n for n in ctx.kube.list_nodes(label_selector=CLIQUE_LABEL)}
    problems = [p for t in trays for p in tray_problems(nodes.get(t), t, boots.get(t))]
    if problems:
        facts = {**detail, "problems": problems}
        waited = (ctx.clock.now() - started).total_seconds()
        if waited > limit:
            return Failed(
                f"rack {detail['rack']} not valid after {waited:.0f}s: {'; '.join(problems[:3])}",
                facts,
            )
        return Waiting(
            f"rack {detail['rack']}: {len(problems)} problem(s) left, e.g. {problems[0]}",
            POLL_SECONDS,
            facts,
        )
    facts = {**detail, "new_node": record.node}
    if detail["action"] == "repair":
        # Same machines: the ladder's own checks come next, and its uncordon returns them all.
        return Done(
            f"rack {detail['rack']} repaired (operation {detail['operation_id']}); its "
            f"{len(trays)} trays Ready with a new boot",
            facts,
        )
    if planner.validates(parse_ladder(record.ladder)):
        # New machines that take no work before each has passed: validate checks every tray
        # and verify returns them together.
        return Done(
            f"rack {detail['rack']} replaced (operation {detail['operation_id']}); its "
            f"{len(trays)} trays Ready and fenced for their validation",
            facts,
        )
    returned = return_trays(record, ctx, tuple(trays))
    if not isinstance(returned, Done):
        return returned
    return Done(
        f"rack {detail['rack']} replaced (operation {detail['operation_id']}); its "
        f"{len(trays)} trays Ready and returned to service together",
        facts,
    )


def fence_arrivals(record: RemediationRecord, ctx: StepContext, trays: list[str]) -> Outcome:
    """Every tray of a rack being replaced fenced the moment it is there: the new Node objects
    come without the old ones' cordon, and the pods the drain evicted are waiting for somewhere
    to run. A tray already fenced by this remediation costs one read."""
    for tray in trays:
        try:
            fenced = ctx.fences.fence(tray, ctx.why(record, f"validating {tray}"))
        except NotFoundError:
            continue  # between the old machine leaving and the new one joining
        if not isinstance(fenced, Done):
            return fenced
    return Done(f"{len(trays)} trays fenced", {"trays": trays})


def return_trays(record: RemediationRecord, ctx: StepContext, trays: tuple[str, ...]) -> Outcome:
    """Every tray of the rack back into service, in one step."""
    return all_trays(trays, [ctx.fences.unfence(tray, str(record.id)) for tray in trays])


def last_rack_request(record: RemediationRecord) -> EventRecord | None:
    """This remediation's last rack operation request; None when it asked for none."""
    return next((e for e in reversed(record.events) if e.action == RACK_REQUESTED), None)


def rack_trays(record: RemediationRecord) -> tuple[str, ...]:
    """The trays of this remediation's last rack operation; empty when it asked for none."""
    requested = last_rack_request(record)
    if requested is None:
        return ()
    return tuple(str(t) for t in requested.detail.get("trays") or ())


def all_trays(trays: tuple[str, ...], outcomes: list[Outcome]) -> Outcome:
    """One outcome for one step done on every tray of a rack (pure): the first tray that holds
    or fails decides; else it waits while any tray waits; else it is done for all."""
    for outcome in outcomes:
        if not isinstance(outcome, Done | Waiting):
            return outcome
    waiting = [(t, o) for t, o in zip(trays, outcomes, strict=True) if isinstance(o, Waiting)]
    if waiting:
        tray, first = waiting[0]
        return Waiting(
            f"{len(waiting)} of {len(trays)} trays still at it; {tray}: {first.reason}",
            min(o.retry_after for _, o in waiting),
            {**first.facts, "trays": list(trays), "waiting": [t for t, _ in waiting]},
        )
    lead = outcomes[0]
    assert isinstance(lead, Done)
    if len(trays) == 1:
        return lead
    return Done(
        f"{lead.detail}; and the {len(trays) - 1} other tray(s) of its rack",
        {**lead.facts, "trays": list(trays)},
    )
