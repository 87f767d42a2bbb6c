"""Validate: burn-in before a node takes work. The node under test — the new machine after a
replacement, else the repaired node — is fenced (cordon + taint) first and stays so; each check
runs its programs as Jobs on it (actions/jobs.py), one check after another (DCGM and NCCL both
want every GPU), and its verdict (actions/burnin.py) goes on the timeline with its time. The
first failing check fails the step with its evidence; the planner decides what follows.
The settings' startup taint (every new machine registers with it) is removed on a pass only:
a machine that fails keeps it, and its cordon, until it leaves.

Resumable from the timeline alone: a check whose `validation_check` line exists since the step
was entered is not run again; a check whose Jobs were started (`validation_check_started`) only
waits for them. A Job the node cannot run (unschedulable, refused by the kubelet) holds the
step with that reason: it says nothing about the machine's health."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from remediator.actions import burnin
from remediator.actions.burnin import Checks, Verdict
from remediator.actions.jobs import JobRun, JobState, job_name, render_job, run_job
from remediator.actions.outcome import Done, Failed, Held, Outcome, Waiting
from remediator.actions.quarantine import Why, quarantine
from remediator.errors import NotFoundError
from remediator.kube.objects import Node, Taint
from remediator.model.states import State
from remediator.policy.ladder import LadderStep
from remediator.remediation.steps.context import StepContext
from remediator.store.records import EventRecord, RemediationRecord
from remediator.store.validations import pool_inventories, validation_runs

STEP = "validate"
CHECK_STARTED = "validation_check_started"
CHECK_DONE = "validation_check"
DEFAULT_TIMEOUT = 1800.0
GPU_PRODUCT = "nvidia.com/gpu.product"


def validated_node(record: RemediationRecord) -> str:
    """The machine under test: the replacement when there is one, else the repaired node."""
    return record.new_node or record.node


def round_of(record: RemediationRecord) -> int:
    """Which validation of this remediation this is (each entry into VALIDATING runs new Jobs)."""
    return max(0, sum(1 for e in record.events if e.to_state is State.VALIDATING) - 1)


def _since_entry(record: RemediationRecord, since: datetime) -> list[EventRecord]:
    return [e for e in record.events if e.at >= since and e.to_state is None]


def _lines(
    record: RemediationRecord, since: datetime, action: str, node: str
) -> dict[str, EventRecord]:
    return {
        str(e.detail.get("check")): e
        for e in _since_entry(record, since)
        if e.action == action and e.detail.get("node") == node
    }


def run(record: RemediationRecord, step: LadderStep, ctx: StepContext) -> Outcome:
    checks = Checks.from_json(step.checks)
    node = validated_node(record)
    new_machine = record.new_node is not None
    level = checks.dcgm_level_new if new_machine else checks.dcgm_level
    if record.dry_run:
        return Done(
            f"dry run: would validate {node} ({', '.join(checks.enabled())}; DCGM level {level})",
            {"dry_run": True, "node": node},
        )
    started = ctx.entered(record)
    timeout = step.timeout_seconds or DEFAULT_TIMEOUT
    facts: dict[str, Any] = {
        "node": node,
        "new_machine": new_machine,
        "pool": record.pool,
        "provider": ctx.provider_kind(record.pool),
    }
    joined = _joined(ctx, node)
    if joined is None:
        if (ctx.clock.now() - started).total_seconds() > timeout:
            return Failed(f"{node} did not turn Ready within {timeout:.0f}s", facts)
        return Waiting(f"waiting for {node} to be Ready for its validation", ctx.repair_poll, facts)
    fenced = quarantine(ctx.kube, node, Why(str(record.id), record.policy, f"validating {node}"))
    if not isinstance(fenced, Done):
        return fenced
    done = _lines(record, started, CHECK_DONE, node)
    begun = _lines(record, started, CHECK_STARTED, node)
    verdicts = [done[c].detail for c in checks.enabled() if c in done]
    for check in checks.enabled():
        if check in done:
            if not done[check].detail.get("passed"):
                return Failed(str(done[check].detail.get("reason")), _evidence(facts, verdicts))
            continue
        outcome = _run_check(record, ctx, check, checks, joined, node, level, begun, verdicts)
        if isinstance(outcome, Mapping):
            verdicts.append(outcome)
            if not outcome["passed"]:
                return Failed(str(outcome["reason"]), _evidence(facts, verdicts))
            continue
        if isinstance(outcome, Waiting) and check in begun:
            waited = (ctx.clock.now() - begun[check].at).total_seconds()
            if waited > timeout:
                verdict = Verdict(check, False, f"{check} did not finish within {timeout:.0f}s")
                line = _record(record, ctx, node, verdict, waited)
                return Failed(verdict.reason, _evidence(facts, [*verdicts, line]))
        return outcome
    summary = "; ".join(str(v.get("reason")) for v in verdicts)
    evidence = _evidence(facts, verdicts)
    if checks.startup_taint:
        # Only now may the machine ever take work: it stays cordoned and quarantined until
        # verify or uncordon releases it, so removing this first never opens a gap.
        taint = Taint.parse(checks.startup_taint)
        ctx.kube.remove_taint(node, taint.key, taint.effect)
        evidence["startup_taint_removed"] = checks.startup_taint
    return Done(f"{node} passed validation: {summary}", evidence)


def _evidence(facts: Mapping[str, Any], verdicts: list[Mapping[str, Any]]) -> dict[str, Any]:
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


def _gpu_count(node: Node, verdicts: list[Mapping[str, Any]]) -> int:
    for verdict in verdicts:
        inventory = verdict.get("inventory")
        if isinstance(inventory, Mapping) and inventory.get("gpu_count"):
            return int(inventory["gpu_count"])
    return node.gpus or 1


def _gpu_model(node: Node, verdicts: list[Mapping[str, Any]]) -> str | None:
    for verdict in verdicts:
        inventory = verdict.get("inventory")
        if isinstance(inventory, Mapping) and inventory.get("gpu_model"):
            return str(inventory["gpu_model"])
    return node.labels.get(GPU_PRODUCT)


def _run_check(
    record: RemediationRecord,
    ctx: StepContext,
    check: str,
    checks: Checks,
    node_obj: Node,
    node: str,
    level: int,
    begun: dict[str, EventRecord],
    verdicts: list[Mapping[str, Any]],
) -> Mapping[str, Any] | Outcome:
    """The check's verdict line once its Jobs are done; else how it waits (or why it holds)."""
    argvs = burnin.programs(check, dcgm_level=level, gpus=_gpu_count(node_obj, verdicts))
    if check not in begun:
        ctx.repo.append_event(
            record.id,
            action=CHECK_STARTED,
            actor=ctx.actor,
            detail={
                "check": check,
                "node": node,
                "programs": [" ".join(a) for a in argvs.values()],
            },
        )
        started_at = ctx.clock.now()
    else:
        started_at = begun[check].at
    runs: dict[str, JobRun] = {}
    blocked = ""
    for program, argv in argvs.items():
        name = job_name(STEP, str(record.id), round_of(record), f"{check}-{program}")
        job = render_job(
            ctx.jobs, name=name, node=node, step=STEP, remediation=str(record.id), command=argv
        )
        runs[program], why = _follow(ctx, run_job(ctx.kube, ctx.jobs, job))
        blocked = blocked or why
    if blocked:
        return Held(
            f"validation Job cannot run on {node}: {blocked}",
            {"node": node, "check": check, "unschedulable": blocked},
        )
    running = sorted(p for p, r in runs.items() if r.state is JobState.RUNNING)
    if running:
        return Waiting(
            f"validating {node}: {check} running ({', '.join(running)})",
            ctx.repair_poll,
            {"node": node, "check": check},
        )
    verdict = _verdict(record, ctx, check, checks, node_obj, level, runs, verdicts)
    seconds = (ctx.clock.now() - started_at).total_seconds()
    return _record(record, ctx, node, verdict, seconds)


def _follow(ctx: StepContext, run: JobRun) -> tuple[JobRun, str]:
    """A running Job as its pod shows it: finished as soon as the pod has (the Job's own status
    follows a moment later, and the check should not wait a poll for it), or why its pod cannot
    run on the node."""
    if run.state is not JobState.RUNNING:
        return run, ""
    for pod in ctx.kube.list_pods(ctx.jobs.namespace, f"job-name={run.name}"):
        if pod.unschedulable:
            return run, f"{run.name}: {pod.unschedulable}"
        if pod.phase in ("Succeeded", "Failed"):
            state = JobState.SUCCEEDED if pod.phase == "Succeeded" else JobState.FAILED
            log = ctx.kube.read_pod_log(ctx.jobs.namespace, pod.name)
            return JobRun(run.name, state, pod.exit_code, log), ""
    return run, ""


def _verdict(
    record: RemediationRecord,
    ctx: StepContext,
    check: str,
    checks: Checks,
    node: Node,
    level: int,
    runs: Mapping[str, JobRun],
    verdicts: list[Mapping[str, Any]],
) -> Verdict:
    if check == burnin.DCGM:
        run = runs["diag"]
        return burnin.dcgm_verdict(run.log, level, run.exit_code)
    if check == burnin.NCCL:
        return burnin.nccl_verdict(
            runs["allreduce"].log, _gpu_model(node, verdicts), checks.busbw_floor
        )
    read = burnin.read_inventory({p: r.log for p, r in runs.items()})
    if isinstance(read, Verdict):
        return read
    return burnin.inventory_verdict(read, _baseline(record, ctx, checks))


def _baseline(
    record: RemediationRecord, ctx: StepContext, checks: Checks
) -> burnin.Baseline | None:
    if record.pool is None:
        return burnin.baseline_of([], checks.pins)
    runs = validation_runs(ctx.repo.session_factory, ctx.repo.cluster, pool=record.pool)
    node = validated_node(record)
    peers = [inv for name, inv in pool_inventories(runs).items() if name != node]
    return burnin.baseline_of(peers, checks.pins)


def _record(
    record: RemediationRecord, ctx: StepContext, node: str, verdict: Verdict, seconds: float
) -> Mapping[str, Any]:
    line = {**verdict.to_json(), "node": node, "seconds": round(seconds, 3)}
    ctx.repo.append_event(record.id, action=CHECK_DONE, actor=ctx.actor, detail=line)
    return line
