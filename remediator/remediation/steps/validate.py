"""Validate: burn-in before a node takes work. The node under test — the new machine after a
replacement, else the repaired node — is fenced (cordon + taint) first and stays so; all of the
enabled checks' programs run in ONE Job on it (actions/checkjob.py: one container, the programs
in sequence — DCGM and NCCL both want every GPU — each one's output between markers), so the
Job round trip is paid once per validation, not once per check. The log is split back into each
check's sections and each check's verdict (actions/burnin.py) goes on the timeline with its own
time; the first failing check fails the step with its evidence and the planner decides what
follows. The settings' startup taint (every new machine registers with it) is removed on a pass
only: a machine that fails keeps it, and its cordon, until it leaves.

After a rack operation (steps/domain.py) every tray of the rack is under test, each in its own
Job, side by side; the step ends when every tray has its verdict, passes only when all passed,
and otherwise fails with the failing tray's evidence while the whole rack stays fenced.

Resumable from the timeline alone: the Job is named after the remediation and the round, and
its `validation_started` line says when it was started; a check whose `validation_check` line
exists since the step was entered is not judged again. A Job the node cannot run
(unschedulable, refused by the kubelet) holds the step with that reason: it says nothing about
the machine's health. That hold is looked at again every poll (steps/job_hold.py): once the pod
runs, the remediation comes back here (`validation_job_runs`), which is not a new round: the
same Job and lines are followed, only the timeouts count afresh from the return."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from remediator.actions import burnin, checkjob
from remediator.actions.burnin import Checks, Verdict
from remediator.actions.checkjob import Program, Section
from remediator.actions.jobs import JobRun, JobState, job_name, render_job, run_job, tail
from remediator.actions.outcome import Done, Failed, Held, Outcome, Waiting
from remediator.errors import NotFoundError
from remediator.kube.objects import GPU_RESOURCE, Node, Pod, Taint, pod_gpus
from remediator.model.gpus import GPU_PRODUCT_LABEL
from remediator.model.states import State
from remediator.policy.ladder import LadderStep
from remediator.remediation.journal import entered_at
from remediator.remediation.planner import VALIDATION_JOB_RUNS
from remediator.remediation.steps import domain
from remediator.remediation.steps.context import StepContext
from remediator.store.records import EventRecord, RemediationRecord
from remediator.store.validations import pool_inventories, validation_runs

STEP = "validate"
STARTED = "validation_started"
CHECK_DONE = "validation_check"
DEFAULT_TIMEOUT = 1800.0
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"  # what a cordon reads as to the scheduler


def validated_node(record: RemediationRecord) -> str:
    """The machine under test: the replacement when there is one, else the repaired node."""
    return record.new_node or record.node


def _entries(record: RemediationRecord) -> list[EventRecord]:
    """The entries into VALIDATING that start a validation: not the engine's return from a hold
    once the held Job could run (that one follows the Job already started)."""
    return [
        e
        for e in record.events
        if e.to_state is State.VALIDATING and e.action != VALIDATION_JOB_RUNS
    ]


def round_of(record: RemediationRecord) -> int:
    """Which validation of this remediation this is (each entry into VALIDATING runs a new Job,
    but for the return of a held Job that could run after all)."""
    return max(0, len(_entries(record)) - 1)


@dataclass(frozen=True)
class Since:
    """`lines`: the entry whose Job and timeline lines this validation follows; `clock`: the
    last entry, automatic returns included, which the timeouts count from (time spent held
    waiting for the node to take the Job never fails the machine)."""

    lines: datetime
    clock: datetime


def since(record: RemediationRecord) -> Since:
    entries = _entries(record)
    last = entered_at(record, State.VALIDATING)
    return Since(entries[-1].at if entries else last, last)


def _since_entry(
    record: RemediationRecord, since: datetime, action: str, node: str
) -> list[EventRecord]:
    return [
        e
        for e in record.events
        if e.at >= since
        and e.to_state is None
        and e.action == action
        and e.detail.get("node") == node
    ]


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    checks = Checks.from_json(step.checks)
    trays = domain.rack_trays(record)
    node = validated_node(record)
    new_machine = record.new_node is not None
    level = checks.dcgm_level_new if new_machine else checks.dcgm_level
    if record.dry_run:
        what = f"the {len(trays)} trays of its rack" if trays else node
        return Done(
            f"dry run: would validate {what} ({', '.join(checks.enabled())}; DCGM level {level})",
            {"dry_run": True, "node": node},
        )
    started = since(record)
    timeout = step.timeout_seconds or DEFAULT_TIMEOUT
    under_test = trays or (node,)
    outcomes = [
        _validate_node(
            record, ctx, checks, tray, level, started, timeout, f"checks-{i}" if trays else "checks"
        )
        for i, tray in enumerate(under_test)
    ]
    outcome = rack_verdict(_rack_name(record), under_test, outcomes) if trays else outcomes[0]
    if not isinstance(outcome, Done) or not checks.startup_taint:
        return outcome
    # Only now may the machines ever take work: they stay cordoned and quarantined until
    # verify or uncordon releases them, so removing this first never opens a gap.
    taint = Taint.parse(checks.startup_taint)
    for tray in under_test:
        ctx.kube.remove_taint(tray, taint.key, taint.effect)
    return Done(outcome.detail, {**outcome.facts, "startup_taint_removed": checks.startup_taint})


def _rack_name(record: RemediationRecord) -> str:
    requested = domain.last_rack_request(record)
    return str(requested.detail.get("rack")) if requested is not None else record.node


def rack_verdict(rack: str, trays: Sequence[str], outcomes: Sequence[Outcome]) -> Outcome:
    """One outcome for a rack whose trays are validated side by side (pure). It waits while any
    tray's Job runs, so every tray has its verdict on the timeline before the step ends; then a
    tray held (its Job cannot run) holds it, a tray that failed fails it with that tray's
    evidence (the rack stays fenced), and it is done only when every tray passed."""
    verdicts = [
        {
            "node": t,
            "passed": isinstance(o, Done),
            "reason": o.detail if isinstance(o, Done) else o.reason,
        }
        for t, o in zip(trays, outcomes, strict=True)
        if isinstance(o, Done | Failed)
    ]
    waiting = [(t, o) for t, o in zip(trays, outcomes, strict=True) if isinstance(o, Waiting)]
    if waiting:
        tray, first = waiting[0]
        return Waiting(
            f"rack {rack}: {len(waiting)} of {len(trays)} trays still validating; "
            f"{tray}: {first.reason}",
            min(o.retry_after for _, o in waiting),
            {"rack": rack, "waiting": [t for t, _ in waiting], "judged": len(verdicts)},
        )
    for outcome in outcomes:
        if isinstance(outcome, Held):
            return Held(outcome.reason, {**outcome.facts, "rack": rack, "trays": verdicts})
    failed = [o for o in outcomes if isinstance(o, Failed)]
    if failed:
        return Failed(
            f"rack {rack}: {len(failed)} of {len(trays)} trays failed validation; "
            f"{failed[0].reason}",
            {**failed[0].facts, "rack": rack, "trays": verdicts},
        )
    lead = outcomes[0]
    assert isinstance(lead, Done)
    return Done(
        f"rack {rack}: all {len(trays)} trays passed validation",
        {**lead.facts, "rack": rack, "trays": verdicts},
    )


def _validate_node(
    record: RemediationRecord,
    ctx: StepContext,
    checks: Checks,
    node: str,
    level: int,
    started: Since,
    timeout: float,
    suffix: str,
) -> Outcome:
    """One machine's validation: fenced, its Job run (or followed), its checks judged."""
    facts: dict[str, Any] = {
        "node": node,
        "new_machine": record.new_node is not None,
        "pool": record.pool,
        "provider": ctx.provider_kind(record.pool),
    }
    joined = _joined(ctx, node)
    if joined is None:
        if (ctx.clock.now() - started.clock).total_seconds() > timeout:
            return Failed(f"{node} did not turn Ready within {timeout:.0f}s", facts)
        return Waiting(f"waiting for {node} to be Ready for its validation", ctx.repair_poll, facts)
    fenced = ctx.fences.fence(node, ctx.why(record, f"validating {node}"))
    if not isinstance(fenced, Done):
        return fenced
    judged: dict[str, Mapping[str, Any]] = {
        str(e.detail.get("check")): e.detail
        for e in _since_entry(record, started.lines, CHECK_DONE, node)
    }
    if any(c not in judged for c in checks.enabled()):
        ran = _run_job(record, ctx, checks, joined, node, level, started, timeout, judged, suffix)
        if not isinstance(ran, dict):
            return ran
        judged = ran
    verdicts = [judged[c] for c in checks.enabled()]
    for verdict in verdicts:
        if not verdict.get("passed") and not verdict.get("skipped"):
            return Failed(str(verdict.get("reason")), _evidence(facts, verdicts))
    summary = "; ".join(str(v.get("reason")) for v in verdicts)
    return Done(f"{node} passed validation: {summary}", _evidence(facts, verdicts))


def _evidence(facts: Mapping[str, Any], verdicts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {**facts, "checks": [dict(v) for v in verdicts]}
    for verdict in verdicts:
        if verdict.get("check") == burnin.INVENTORY and verdict.get("inventory"):
            out["inventory"] = verdict["inventory"]
            out["gpu_model"] = verdict["inventory"].get("gpu_model")
    return out


def _joined(ctx: StepContext, node: str) -> Node | None:
    try:
        found = ctx.kube.get_node(node)
    except NotFoundError:
        return None
    return found if found.ready else None


def _gpu_model(node: Node, verdicts: Mapping[str, Mapping[str, Any]]) -> str | None:
    for verdict in verdicts.values():
        inventory = verdict.get("inventory")
        if isinstance(inventory, Mapping) and inventory.get("gpu_model"):
            return str(inventory["gpu_model"])
    return node.labels.get(GPU_PRODUCT_LABEL)


def programs(
    checks: Checks, level: int, gpus: int, node: str = "", peer: str | None = None
) -> list[Program]:
    """Every enabled check's programs, in the order the Job runs them."""
    return [
        Program(check, name, tuple(argv))
        for check in checks.enabled()
        for name, argv in burnin.programs(
            check, dcgm_level=level, gpus=gpus, node=node, peer=peer
        ).items()
    ]


def _peer(record: RemediationRecord, ctx: StepContext, node: str) -> str | None:
    """A healthy node of the pool to run the two-node all-reduce with (burnin.choose_peer)."""
    if record.pool is None or not ctx.pool_label:
        return None
    pool_nodes = ctx.kube.list_nodes(f"{ctx.pool_label}={record.pool}")
    runs = validation_runs(ctx.repo.session_factory, ctx.repo.cluster, pool=record.pool)
    busy = {n for r in ctx.repo.list_open() for n in (r.node, r.new_node) if n}
    return burnin.choose_peer(node, pool_nodes, pool_inventories(runs), busy)


def _run_job(
    record: RemediationRecord,
    ctx: StepContext,
    checks: Checks,
    node_obj: Node,
    node: str,
    level: int,
    started: Since,
    timeout: float,
    judged: Mapping[str, Mapping[str, Any]],
    suffix: str,
) -> dict[str, Mapping[str, Any]] | Outcome:
    """Every check's verdict line once the Job is done; else how the step waits (or why it
    holds). The NCCL checks span the GPUs the node advertises: the inventory, which reads them,
    runs in the same Job. The two-node check's peer is chosen once, when the Job starts (its
    line keeps it); with none, the check is recorded as skipped and the Job runs without it."""
    name = job_name(STEP, str(record.id), round_of(record), suffix)
    begun = _since_entry(record, started.lines, STARTED, node)
    lines: dict[str, Mapping[str, Any]] = dict(judged)
    pair = checks.nccl_pair and burnin.NCCL_PAIR not in judged
    if begun:
        raw_peer = begun[0].detail.get("peer")
        peer = str(raw_peer) if raw_peer else None
    else:
        peer = _peer(record, ctx, node) if pair else None
        if pair and peer is None:
            skipped = burnin.no_peer_verdict(record.pool)
            lines[burnin.NCCL_PAIR] = _record(record, ctx, node, skipped, None)
    wanted = programs(checks, level, node_obj.gpus or 1, node, peer)
    if not begun:
        ctx.repo.append_event(
            record.id,
            action=STARTED,
            actor=ctx.actor,
            detail={
                "node": node,
                "job": name,
                "checks": list(checks.enabled()),
                "programs": [shlex.join(p.argv) for p in wanted],
                "peer": peer,
            },
        )
        began_at = ctx.clock.now()
    else:
        began_at = max(begun[0].at, started.clock)
    job = render_job(
        ctx.jobs,
        name=name,
        node=node,
        step=STEP,
        remediation=str(record.id),
        command=checkjob.command(wanted),
    )
    run, blocked = _follow(ctx, run_job(ctx.kube, ctx.jobs, job))
    if blocked:
        return cannot_run(job, node_obj, ctx.kube.list_pods_on_node(node), blocked)
    pending = [c for c in checks.enabled() if c not in lines]
    if run.state is JobState.RUNNING:
        waited = (ctx.clock.now() - began_at).total_seconds()
        if waited <= timeout:
            return Waiting(
                f"validating {node}: {', '.join(pending)} running in {name}",
                ctx.repair_poll,
                {"node": node, "job": name, "checks": pending},
            )
        late = f"the validation Job {name} did not finish within {timeout:.0f}s"
        for c in pending:
            lines[c] = _record(record, ctx, node, Verdict(c, False, f"{c}: {late}"), None)
        return lines
    found = checkjob.sections(run.log)
    for check in pending:
        mine = [p for p in wanted if p.check == check]
        verdict = _verdict(
            record, ctx, check, checks, node_obj, level, mine, found, run, lines, peer
        )
        lines[check] = _record(record, ctx, node, verdict, checkjob.check_seconds(found, check))
    return lines


def _follow(ctx: StepContext, run: JobRun) -> tuple[JobRun, str]:
    """A Job as its pod shows it: finished as soon as the pod has (the Job's own status follows
    a moment later, and the check should not wait a poll for it), or why its pod cannot run on
    the node. A Job already Failed is looked at too: with backoffLimit 0 a pod the kubelet
    refused fails the Job at once, and that is no verdict on the machine."""
    if run.state is JobState.SUCCEEDED:
        return run, ""
    for pod in ctx.kube.list_pods(ctx.jobs.namespace, f"job-name={run.name}"):
        if pod.unschedulable:
            return run, f"{run.name}: {pod.unschedulable}"
        if run.state is JobState.RUNNING and pod.phase in ("Succeeded", "Failed"):
            state = JobState.SUCCEEDED if pod.phase == "Succeeded" else JobState.FAILED
            log = ctx.kube.read_pod_log(ctx.jobs.namespace, pod.name)
            return JobRun(run.name, state, pod.exit_code, log), ""
    return run, ""


def cannot_run(job: Mapping[str, Any], node: Node, on_node: Sequence[Pod], blocked: str) -> Held:
    """The hold of a Job the node cannot run: in the node's own terms when they explain it,
    else the scheduler's or the kubelet's (`blocked`)."""
    why = not_here(job, node, on_node)
    name = str(job.get("metadata", {}).get("name", ""))
    return Held(
        f"validation Job cannot run on {node.name}: {why or blocked}",
        {"node": node.name, "job": name, "unschedulable": blocked, "blocked_by": why or None},
    )


def _tolerated(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.effect:
            continue
        exists = tol.get("operator", "Equal") == "Exists"
        if not tol.get("key"):
            if exists:
                return True
            continue
        if tol["key"] == taint.key and (exists or str(tol.get("value") or "") == taint.value):
            return True
    return False


def not_here(job: Mapping[str, Any], node: Node, on_node: Sequence[Pod]) -> str:
    """What keeps the Job's pod off this node, in the node's own terms: the scheduler's message
    counts every node of the cluster ("0/N nodes are available: …"), which for a Job meant for
    one node mostly lists the nodes it was never meant for. "" when nothing here explains it."""
    spec = job.get("spec", {}).get("template", {}).get("spec", {})
    tolerations = spec.get("tolerations") or []
    found = []
    cordon = Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule")
    if node.unschedulable and not _tolerated(tolerations, cordon):
        found.append(f"the node is cordoned and the Job does not tolerate {UNSCHEDULABLE_TAINT}")
    untolerated = [
        t
        for t in node.taints
        if t.effect in ("NoSchedule", "NoExecute") and not _tolerated(tolerations, t)
    ]
    if untolerated:
        shown = ", ".join(
            f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in untolerated
        )
        found.append(f"the Job does not tolerate the node's taint {shown}")
    wanted = pod_gpus(spec)
    holders = [p for p in on_node if p.gpus and p.phase not in ("Succeeded", "Failed")]
    held = sum(p.gpus for p in holders)
    if wanted and node.gpus is not None and held + wanted > node.gpus:
        by = ", ".join(f"{p.namespace}/{p.name} ({p.gpus})" for p in holders)
        found.append(
            f"the Job asks {wanted} {GPU_RESOURCE}, {max(0, node.gpus - held)} of the node's "
            f"{node.gpus} free" + (f" (held by {by})" if by else "")
        )
    return "; ".join(found)


def missing_verdict(check: str, absent: Sequence[Program], log: str) -> Verdict:
    """A check whose sections the Job's log does not hold: failed, with what the log ends with."""
    names = ", ".join(shlex.join(p.argv[:1]) for p in absent)
    return Verdict(
        check,
        False,
        f"{check}: the validation Job's log has no complete output of {names}",
        {"programs": [shlex.join(p.argv) for p in absent], "raw_tail": tail(log, 1000)},
    )


def _verdict(
    record: RemediationRecord,
    ctx: StepContext,
    check: str,
    checks: Checks,
    node: Node,
    level: int,
    mine: Sequence[Program],
    found: Mapping[tuple[str, str], Section],
    run: JobRun,
    verdicts: Mapping[str, Mapping[str, Any]],
    peer: str | None,
) -> Verdict:
    absent = [p for p in mine if (check, p.name) not in found]
    if absent:
        return missing_verdict(check, absent, run.log)
    out = {p.name: found[(check, p.name)] for p in mine}
    if check == burnin.DCGM:
        return burnin.dcgm_verdict(out["diag"].output, level, out["diag"].exit_code)
    if check == burnin.NCCL:
        return burnin.nccl_verdict(
            out["allreduce"].output, _gpu_model(node, verdicts), checks.busbw_floor
        )
    if check == burnin.NCCL_PAIR and peer is not None:
        return burnin.nccl_pair_verdict(
            out["allreduce"].output,
            _gpu_model(node, verdicts),
            checks.pair_busbw_floor,
            node.name,
            peer,
        )
    if check == burnin.NCCL_PAIR:
        return burnin.no_peer_verdict(record.pool)
    read = burnin.read_inventory({name: s.output for name, s in out.items()})
    if isinstance(read, Verdict):
        return read
    return burnin.inventory_verdict(read, _baseline(record, ctx, checks))


def _baseline(
    record: RemediationRecord, ctx: StepContext, checks: Checks
) -> burnin.Baseline | None:
    """The pool's baseline from what its in-service nodes run now (burnin.baseline_of), not
    from the machines validated so far: the first of those may be the wrong one."""
    if record.pool is None or not ctx.pool_label:
        return burnin.baseline_of({}, checks.pins)
    pool_nodes = ctx.kube.list_nodes(f"{ctx.pool_label}={record.pool}")
    runs = validation_runs(ctx.repo.session_factory, ctx.repo.cluster, pool=record.pool)
    busy = {n for r in ctx.repo.list_open() for n in (r.node, r.new_node) if n}
    startup = Taint.parse(checks.startup_taint).key if checks.startup_taint else None
    readings = burnin.pool_readings(
        validated_node(record), pool_nodes, pool_inventories(runs), busy, startup
    )
    return burnin.baseline_of(readings, checks.pins)


def _record(
    record: RemediationRecord,
    ctx: StepContext,
    node: str,
    verdict: Verdict,
    seconds: float | None,
) -> Mapping[str, Any]:
    line = {**verdict.to_json(), "node": node, "seconds": seconds}
    ctx.repo.append_event(record.id, action=CHECK_DONE, actor=ctx.actor, detail=line)
    return line
