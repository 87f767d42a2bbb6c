"""The one hold the engine ends by itself: a validation held because the node could not run its
Job (steps/validate.py). What kept the pod off — a taint, a cordon the Job does not tolerate,
GPUs another pod holds, the scheduler — may go without anyone touching the remediation, and a
hold left alone then reads a stale reason for ever. So the service looks at such a hold every
poll (`rechecks`, `recheck`): while the pod is still kept off, the reason follows what keeps it
off now; once the pod runs or has run, the planner moves the remediation back to validating
(`validation_job_runs`) and the same Job is followed to its verdict.

A pod the node never ran is never judged: a Job gone, or ended without its pod running (an
operator's template with a deadline), keeps the hold with that reason; a release runs a new
Job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from remediator.actions.outcome import Done, Held, Outcome
from remediator.kube.objects import Pod
from remediator.model.states import State
from remediator.remediation.planner import STEP_NAMES
from remediator.remediation.steps import validate
from remediator.remediation.steps.context import StepContext
from remediator.store.records import RemediationRecord

HELD_ACTION = f"{STEP_NAMES[State.VALIDATING]}_held"
RAN = frozenset({"Running", "Succeeded", "Failed"})


def rechecks(record: RemediationRecord) -> bool:
    """Whether the engine looks at this hold again: held from validating because a Job could
    not run on the node (its line names why: `unschedulable`); never a dry run's."""
    if record.state is not State.HELD or record.dry_run:
        return False
    entry = next((e for e in reversed(record.events) if e.to_state is not None), None)
    return (
        entry is not None
        and entry.to_state is State.HELD
        and entry.action == HELD_ACTION
        and bool(entry.detail.get("unschedulable"))
    )


def recheck(record: RemediationRecord, ctx: StepContext) -> Outcome:
    """Done once every Job this validation started runs or has run; else Held with what keeps
    the first of them off now (the current reason while a pod merely has not started yet)."""
    start = validate.since(record).lines
    jobs = [
        (str(e.detail.get("job")), str(e.detail.get("node")))
        for e in record.events
        if e.at >= start and e.to_state is None and e.action == validate.STARTED
    ]
    current = Held(record.hold_reason or "", {})
    for name, node in jobs:
        kept = _kept_off(ctx, name, node)
        if kept is not None:
            return kept if kept.reason else current
    if not jobs:
        return current
    shown = "; ".join(f"{name} runs on {node}" for name, node in jobs)
    return Done(
        f"the validation Job the node could not run runs now: {shown}",
        {"jobs": [name for name, _ in jobs], "nodes": [node for _, node in jobs]},
    )


def _kept_off(ctx: StepContext, name: str, node: str) -> Held | None:
    """None when the Job's pod runs or ran; else why it does not (an empty reason: nothing new,
    the pod is not running yet)."""
    job = ctx.kube.get_job(ctx.jobs.namespace, name)
    facts = {"node": node, "job": name}
    if job is None:
        return Held(
            f"validation Job {name} for {node} is gone: release the remediation to run a new one",
            {**facts, "unschedulable": "gone"},
        )
    pods = ctx.kube.list_pods(ctx.jobs.namespace, f"job-name={name}")
    rejected = next((p for p in pods if p.unschedulable), None)
    if rejected is not None:
        on_node = ctx.kube.list_pods_on_node(node)
        blocked = f"{name}: {rejected.unschedulable}"
        return validate.cannot_run(job, ctx.kube.get_node(node), on_node, blocked)
    if _ran(pods):
        return None
    ended = _ended(job)
    if ended:
        return Held(
            f"validation Job {name} ended without running on {node} ({ended}): release the "
            "remediation to run a new one",
            {**facts, "unschedulable": ended},
        )
    return Held("", facts)


def _ran(pods: Sequence[Pod]) -> bool:
    return any(p.phase in RAN or p.running_since is not None for p in pods)


def _ended(job: Mapping[str, Any]) -> str:
    """The Job's Failed or Complete condition, as `reason: message`; "" while it has none."""
    for cond in (job.get("status") or {}).get("conditions") or ():
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return ": ".join(str(x) for x in (cond.get("reason"), cond.get("message")) if x)
    return ""
