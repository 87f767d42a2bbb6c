"""The Slurm side of each remediation step, as small idempotent actions that report an Outcome.

Whose drain is it? The reason says: ours always start with `remediator #ID:`. A node someone
else drained (or set DOWN) is left as it is — already fenced — and never resumed by us. Every
command sent and Slurm's answer go into `journal`, which the engine writes on the timeline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from remediator.actions.outcome import Done, Held, Outcome, Waiting
from remediator.slurm.client import SlurmClient, SlurmJob, SlurmNode
from remediator.slurm.settings import SlurmSettings

POLL_SECONDS = 2.0


def reason_prefix(remediation_id: str) -> str:
    return f"remediator #{remediation_id}:"


def drain_reason(remediation_id: str, policy: str) -> str:
    return f"{reason_prefix(remediation_id)} {policy}"


def ours(node: SlurmNode, remediation_id: str) -> bool:
    return node.reason.startswith(reason_prefix(remediation_id))


@dataclass
class Journal:
    """What was sent to Slurm in one step and what Slurm answered, and what became of each job."""

    entries: list[dict[str, Any]] = field(default_factory=list)

    def add(self, command: str, answer: str, **facts: Any) -> None:
        self.entries.append({"command": command, "answer": answer, **facts})

    def note(self, text: str, **facts: Any) -> None:
        self.entries.append({"note": text, **facts})


def jobs_on(jobs: Iterable[SlurmJob], node: str | Sequence[str]) -> list[SlurmJob]:
    """The jobs running on `node`, or on any of `node`s (an NVLink domain's trays)."""
    nodes = {node} if isinstance(node, str) else set(node)
    return [j for j in jobs if j.on_node and nodes.intersection(j.nodes)]


def _named(node: str | Sequence[str]) -> str:
    if isinstance(node, str):
        return node
    return node[0] if len(node) == 1 else f"{len(node)} nodes ({','.join(node)})"


def opt_out_match(job: SlurmJob, settings: SlurmSettings) -> str | None:
    """What makes the job opt out, in words (None: it does not)."""
    if settings.opt_out_comment and settings.opt_out_comment in job.comment:
        return f"comment {settings.opt_out_comment!r}"
    feature = settings.opt_out_feature
    if feature and feature in re.split(r"[&|,\s\[\]]+", job.features):
        return f"feature {feature!r}"
    return None


def opted_out(job: SlurmJob, settings: SlurmSettings) -> bool:
    return opt_out_match(job, settings) is not None


def drain(
    client: SlurmClient, node: str, remediation_id: str, policy: str, journal: Journal
) -> Outcome:
    """DRAIN with our reason, unless already fenced by us or by someone else."""
    current = client.node(node)
    facts = {"slurm_node": node, "slurm_state": current.describe()}
    if ours(current, remediation_id) and current.fenced:
        return Done(f"Slurm node {node} already drained by us", facts)
    if current.fenced:
        return Done(
            f"Slurm node {node} is already {current.describe()}: left as it is (not ours)",
            {**facts, "foreign_reason": current.reason},
        )
    reason = drain_reason(remediation_id, policy)
    answer = client.set_node_state(node, "drain", reason)
    journal.add(f"scontrol update nodename={node} state=drain reason={reason!r}", answer)
    after = client.node(node)
    return Done(
        f"Slurm node {node} drained: {after.describe()}", {**facts, "slurm_state": after.describe()}
    )


def check_opt_out(
    client: SlurmClient,
    node: str,
    settings: SlurmSettings,
    recorded: Callable[[Sequence[str]], Outcome] | None = None,
) -> Outcome:
    """A job's comment or feature opts out; so does an opt-out recorded for a job on the node
    (`recorded` is asked with the ids of the node's jobs)."""
    here = jobs_on(client.jobs(), node)
    matches = {j.id: m for j in here if (m := opt_out_match(j, settings))}
    on_record = recorded([j.id for j in here]) if recorded is not None else Done("", {})
    parts = (
        [f"{len(matches)} Slurm job(s) on {node} opt out: {_listed(matches)}"] if matches else []
    )
    if isinstance(on_record, Held):
        return Held(
            "; ".join([*parts, on_record.reason]),
            {
                "slurm_node": node,
                "slurm_jobs": list(matches),
                "opt_outs": matches,
                **on_record.facts,
            },
        )
    if not matches:
        text = f"no Slurm job on {node} opts out"
        if isinstance(on_record, Done) and on_record.facts:
            text = f"{text}; {on_record.detail}"
        return Done(text, {"slurm_node": node, **on_record.facts})
    return Held(parts[0], {"slurm_node": node, "slurm_jobs": list(matches), "opt_outs": matches})


def _listed(matches: Mapping[str, str]) -> str:
    return ", ".join(f"{job} ({match})" for job, match in matches.items())


# A job's fate, decided before anything is sent to it.
REQUEUE, CANCEL, HOLD = "requeue", "cancel", "hold"
# How every fate that leaves a job on its node begins: a promise nothing may break later.
LEFT_RUNNING = "left running"
# Slurm states of a job that is over.
FINISHED = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
    }
)


def decide(job: SlurmJob, settings: SlurmSettings) -> str:
    """A requeueable job is requeued; a non-requeueable one gets `slurm.not_requeueable`, decided
    here, before it is signalled, so that whether it honours the signal changes nothing."""
    return REQUEUE if job.requeue else settings.not_requeueable.value


def _decision_text(job: SlurmJob, fate: str) -> str:
    if job.requeue:
        return f"job {job.id} is requeueable: it will be requeued"
    return {
        REQUEUE: f"job {job.id} is not requeueable: requeue allowed and requeued anyway "
        "(slurm.not_requeueable: requeue)",
        CANCEL: f"job {job.id} is not requeueable: it will be cancelled "
        "(slurm.not_requeueable: cancel)",
        HOLD: f"job {job.id} is not requeueable: {LEFT_RUNNING}, the remediation held for a "
        "human (slurm.not_requeueable: hold)",
    }[fate]


@dataclass(frozen=True)
class JobsSoFar:
    """What this step already did to the node's jobs (read back from the timeline)."""

    decided: Mapping[str, str] = field(default_factory=dict)  # job → requeue | cancel | hold
    signalled: frozenset[str] = frozenset()
    settled: frozenset[str] = frozenset()  # requeued or cancelled
    reported: frozenset[str] = frozenset()  # fate written
    left_running: frozenset[str] = frozenset()  # fate written: "left running …"

    @classmethod
    def read(cls, entries: Iterable[Mapping[str, Any]]) -> JobsSoFar:
        """From the journal entries written so far (the remediation's `slurm` lines)."""
        decided: dict[str, str] = {}
        signalled, settled, reported, left = set(), set(), set(), set()
        for entry in entries:
            if entry.get("job") is None:
                continue
            job = str(entry["job"])
            if entry.get("decision"):
                decided[job] = str(entry["decision"])
            if entry.get("signalled"):
                signalled.add(job)
            if entry.get("settled"):
                settled.add(job)
            if entry.get("fate"):
                reported.add(job)
                if str(entry["fate"]).startswith(LEFT_RUNNING):
                    left.add(job)
        return cls(
            decided, frozenset(signalled), frozenset(settled), frozenset(reported), frozenset(left)
        )


def vacate(
    client: SlurmClient,
    node: str | Sequence[str],
    settings: SlurmSettings,
    *,
    so_far: JobsSoFar,
    started_at: datetime,
    grace_seconds: float,
    now: datetime,
    journal: Journal,
    overridden: bool = False,
) -> Outcome:
    """Decide each job's fate, signal, wait up to the grace, requeue or cancel what is left.

    An opted-out job is left running, unless on-call released the opt-out hold (`overridden`):
    then it is decided like any other job, here, before anything takes the node down — it
    would otherwise die with the node while its fate said "left running".

    With SIGTERM a job is requeued (or cancelled) at once: Slurm sends the batch script SIGTERM,
    then SIGKILL after KillWait, and a requeued job comes back PENDING to run elsewhere. Any
    other signal is sent once first, and what still runs at the end of the grace is requeued or
    cancelled. A job to requeue that did not ask for it is allowed to be requeued before it is
    signalled. Requeues and cancels address the whole job (an array task, a heterogeneous job),
    signals the component on this node.

    `node` may be the nodes of an NVLink domain, vacated as one: a job whose node list spans
    several of them is decided, signalled and requeued once, not once per tray. (Slurm's block
    topology, which would place and requeue by domain itself, is 23.11+; Debian's 22.05 has only
    the node list.) The caller drains all of them first, so a requeued job cannot start again
    on a tray of the faulty domain before its own tray is reached."""
    listed = client.jobs()
    here = jobs_on(listed, node)
    matches = {j.id: m for j in here if (m := opt_out_match(j, settings))}
    opt_outs = {} if overridden else matches
    work = [j for j in here if j.id not in opt_outs]
    fates = dict(so_far.decided)
    for job in work:
        if job.id not in fates:
            fates[job.id] = decide(job, settings)
            text = _decision_text(job, fates[job.id])
            if job.id in matches:
                text = f"{text}; its opt-out ({matches[job.id]}) was released by on-call"
            journal.note(text, job=job.id, decision=fates[job.id])
    sig = settings.signal.upper().removeprefix("SIG")
    term = sig == "TERM"
    remaining = grace_seconds - (now - started_at).total_seconds()
    leaving = [j for j in work if fates[j.id] != HOLD]
    sent: set[str] = set()
    for job in leaving:
        if job.state != "RUNNING" or job.id in so_far.settled or job.whole in sent:
            continue
        if not term and job.id not in so_far.signalled:
            _allow(client, job, fates[job.id], journal)
            answer = client.signal_job(job.id, sig)
            journal.add(
                f"scancel --full --signal={sig} {job.id}", answer, job=job.id, signalled=True
            )
        elif term or remaining <= 0:
            _settle(client, job, fates[job.id], journal)
            sent.add(job.whole)
    where = _named(node)
    facts: dict[str, Any] = {
        "slurm_node": node if isinstance(node, str) else list(node),
        "slurm_jobs": [j.id for j in here],
    }
    if leaving:
        if remaining > 0 and not term:
            reason = f"waiting up to {remaining:.0f}s for {len(leaving)} Slurm job(s) on {where}"
            return Waiting(f"{reason} to leave", min(POLL_SECONDS, remaining), facts)
        return Waiting(
            f"{len(leaving)} Slurm job(s) leaving {where}: "
            + ", ".join(f"{j.id} ({fates[j.id]})" for j in leaving),
            POLL_SECONDS,
            facts,
        )
    outcomes = _report(listed, fates, opt_outs, so_far, journal)
    facts["slurm_fates"] = outcomes
    held = [j.id for j in work if fates[j.id] == HOLD]
    if held:
        return Held(
            f"non-requeueable Slurm job(s) {', '.join(held)} on {where} {LEFT_RUNNING} for a human "
            "(slurm.not_requeueable: hold)",
            {**facts, "held_jobs": held},
        )
    if not outcomes:
        return Done(f"no Slurm job on {where}", facts)
    return Done(
        f"no Slurm job left on {where}: " + "; ".join(f"{j} {f}" for j, f in outcomes.items()),
        facts,
    )


def _allow(client: SlurmClient, job: SlurmJob, fate: str, journal: Journal) -> None:
    if fate == REQUEUE and not job.requeue:
        answer = client.allow_requeue(job.whole)
        journal.add(f"scontrol update jobid={job.whole} requeue=1", answer, job=job.id)


def _settle(client: SlurmClient, job: SlurmJob, fate: str, journal: Journal) -> None:
    if fate == REQUEUE:
        _allow(client, job, fate, journal)
        answer = client.requeue_job(job.whole)
        journal.add(f"scontrol requeue {job.whole}", answer, job=job.id, settled=True)
    else:
        answer = client.cancel_job(job.whole)
        journal.add(f"scancel {job.whole}", answer, job=job.id, settled=True)


def fate_of(job: SlurmJob | None, decision: str | None) -> str:
    """What became of a job that left the node (or was left on it), in words."""
    if decision == HOLD:
        return f"{LEFT_RUNNING} (not requeueable; slurm.not_requeueable: hold)"
    if job is None:
        return "gone from Slurm's list"
    if job.state == "CANCELLED" and decision == CANCEL:
        return "cancelled"
    if job.state in FINISHED:
        return f"ended {job.ended()}"
    if decision == REQUEUE:
        where = f", running on {','.join(job.nodes)}" if job.state == "RUNNING" else ""
        return f"requeued ({job.state}{where})"
    return f"{job.state}"


def _report(
    listed: list[SlurmJob],
    fates: Mapping[str, str],
    opt_outs: Mapping[str, str],
    so_far: JobsSoFar,
    journal: Journal,
) -> dict[str, str]:
    """Each job's fate, written on the timeline once."""
    by_id = {j.id: j for j in listed}
    outcomes = {job: fate_of(by_id.get(job), decision) for job, decision in fates.items()}
    outcomes.update({job: f"{LEFT_RUNNING} (opt-out: {match})" for job, match in opt_outs.items()})
    for job, text in outcomes.items():
        if job not in so_far.reported:
            journal.note(f"job {job}: {text}", job=job, fate=text)
    return outcomes


def still_left_running(
    listed: Iterable[SlurmJob], node: str | Sequence[str], left_running: Collection[str]
) -> list[str]:
    """The jobs recorded as left running that still run on `node`: taking the node down (DOWN,
    a reboot, the machine replaced) would kill them and make their recorded fate false."""
    return [j.id for j in jobs_on(listed, node) if j.id in left_running]


def spare_left_running(
    client: SlurmClient, node: str | Sequence[str], left_running: Collection[str], doing: str
) -> Waiting | None:
    """Refuse `doing` (something that takes the node down) while a job the timeline says was
    left running still runs there: wait, holding with the reason, until it ends or a human
    decides its fate; None when nothing is to be spared (Slurm is asked only if some job was
    left running)."""
    if not left_running:
        return None
    still = still_left_running(client.jobs(), node, left_running)
    if not still:
        return None
    where = _named(node)
    return Waiting(
        f"not {doing}: Slurm job(s) {', '.join(still)} on {where} were {LEFT_RUNNING} and would "
        "be killed; waiting for them to end (scancel or requeue them, or cancel the remediation)",
        POLL_SECONDS,
        {
            "slurm_node": node if isinstance(node, str) else list(node),
            "left_running": still,
            "holding": True,
        },
    )


def down(
    client: SlurmClient,
    node: str,
    remediation_id: str,
    policy: str,
    journal: Journal,
    *,
    left_running: Collection[str],
) -> Outcome:
    """DOWN while the machine is replaced; a foreign drain is left (already fenced). Never while
    a job recorded as left running still runs on the node: the replacement waits for it first,
    whoever's the drain, since the machine going away kills it either way."""
    refused = spare_left_running(client, node, left_running, f"setting Slurm node {node} DOWN")
    if refused is not None:
        return refused
    current = client.node(node)
    facts = {"slurm_node": node, "slurm_state": current.describe()}
    if current.fenced and not ours(current, remediation_id):
        return Done(f"Slurm node {node} is {current.describe()}: not ours, left as it is", facts)
    if current.down and ours(current, remediation_id):
        return Done(f"Slurm node {node} already DOWN", facts)
    reason = f"{drain_reason(remediation_id, policy)} (replacing)"
    answer = client.set_node_state(node, "down", reason)
    journal.add(f"scontrol update nodename={node} state=down reason={reason!r}", answer)
    return Done(f"Slurm node {node} set DOWN for the replacement", facts)


def resume(client: SlurmClient, node: str, remediation_id: str, journal: Journal) -> Outcome:
    """RESUME only a node we fenced (the reason is ours), and wait until it is back and idle."""
    current = client.node(node)
    facts = {"slurm_node": node, "slurm_state": current.describe()}
    if not current.fenced:
        if current.responding:
            return Done(f"Slurm node {node} is back: {current.describe()}", facts)
        return Waiting(f"Slurm node {node} not responding yet", POLL_SECONDS, facts)
    if not ours(current, remediation_id):
        return Done(
            f"Slurm node {node} left {current.describe()}: fenced by someone else, not resumed",
            {**facts, "foreign_reason": current.reason},
        )
    if not current.responding:
        # Resuming a node whose slurmd has not registered yet only turns it DOWN again, with
        # our reason gone: wait for the replacement machine's slurmd first.
        return Waiting(f"waiting for the slurmd of {node} to register", POLL_SECONDS, facts)
    answer = client.set_node_state(node, "resume")
    journal.add(f"scontrol update nodename={node} state=resume", answer)
    return Waiting(f"Slurm node {node} resumed; waiting for it to answer", POLL_SECONDS, facts)
