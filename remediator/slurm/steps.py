"""The Slurm side of each remediation step, as small idempotent actions that report an Outcome.

Whose drain is it? The reason says: ours always start with `remediator #ID:`. A node someone
else drained (or set DOWN) is left as it is — already fenced — and never resumed by us. Every
command sent and Slurm's answer go into `journal`, which the engine writes on the timeline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from remediator.actions.outcome import Done, Held, Outcome, Waiting
from remediator.slurm.client import SlurmClient, SlurmJob, SlurmNode
from remediator.slurm.settings import NotRequeueable, SlurmSettings

POLL_SECONDS = 2.0


def reason_prefix(remediation_id: str) -> str:
    return f"remediator #{remediation_id}:"


def drain_reason(remediation_id: str, policy: str) -> str:
    return f"{reason_prefix(remediation_id)} {policy}"


def ours(node: SlurmNode, remediation_id: str) -> bool:
    return node.reason.startswith(reason_prefix(remediation_id))


@dataclass
class Journal:
    """What was sent to Slurm in one step and what Slurm answered."""

    entries: list[dict[str, Any]] = field(default_factory=list)

    def add(self, command: str, answer: str, **facts: Any) -> None:
        self.entries.append({"command": command, "answer": answer, **facts})


def jobs_on(jobs: Iterable[SlurmJob], node: str) -> list[SlurmJob]:
    return [j for j in jobs if j.on_node and node in j.nodes]


def opted_out(job: SlurmJob, settings: SlurmSettings) -> bool:
    if settings.opt_out_comment and settings.opt_out_comment in job.comment:
        return True
    feature = settings.opt_out_feature
    return bool(feature) and feature in job.features.replace("&", ",").split(",")


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


def check_opt_out(client: SlurmClient, node: str, settings: SlurmSettings) -> Outcome:
    holders = [j for j in jobs_on(client.jobs(), node) if opted_out(j, settings)]
    if not holders:
        return Done(f"no Slurm job on {node} opts out", {"slurm_node": node})
    ids = [j.id for j in holders]
    return Held(
        f"{len(ids)} Slurm job(s) on {node} opt out ({settings.opt_out_comment}): "
        + ", ".join(str(i) for i in ids),
        {"slurm_node": node, "slurm_jobs": ids},
    )


def vacate(
    client: SlurmClient,
    node: str,
    settings: SlurmSettings,
    *,
    signalled: frozenset[int],
    started_at: datetime,
    grace_seconds: float,
    now: datetime,
    journal: Journal,
) -> Outcome:
    """Signal the node's jobs, wait up to the grace, requeue (or cancel, or hold) what is left.

    With SIGTERM a requeueable job is requeued at once: Slurm's requeue is what sends it SIGTERM
    (and SIGKILL after KillWait), and the job comes back PENDING to run elsewhere. Any other
    signal is sent once first (`signalled` lists the jobs already sent it, from the timeline)."""
    jobs = [j for j in jobs_on(client.jobs(), node) if not opted_out(j, settings)]
    remaining = grace_seconds - (now - started_at).total_seconds()
    term = settings.signal.upper().removeprefix("SIG") == "TERM"
    facts: dict[str, Any] = {"slurm_node": node, "slurm_jobs": [j.id for j in jobs]}
    if not jobs:
        return Done(f"no Slurm job left on {node}", facts)
    for job in jobs:
        if term and job.requeue:
            if job.state == "RUNNING":
                answer = client.requeue_job(job.id)
                journal.add(f"scontrol requeue {job.id}", answer, job=job.id, signal="TERM")
            continue
        if job.id not in signalled and job.state == "RUNNING":
            sig = settings.signal.upper().removeprefix("SIG")
            answer = client.signal_job(job.id, sig)
            journal.add(
                f"scancel --full --signal={sig} {job.id}", answer, job=job.id, signalled=True
            )
    if remaining > 0:
        return Waiting(
            f"waiting up to {remaining:.0f}s for {len(jobs)} Slurm job(s) on {node} to leave",
            min(POLL_SECONDS, remaining),
            facts,
        )
    return _after_grace(client, jobs, settings, facts, journal)


def _after_grace(
    client: SlurmClient,
    jobs: list[SlurmJob],
    settings: SlurmSettings,
    facts: dict[str, Any],
    journal: Journal,
) -> Outcome:
    running = [j for j in jobs if j.state == "RUNNING"]
    stay = [j for j in running if not j.requeue and settings.not_requeueable is NotRequeueable.HOLD]
    if stay:
        ids = ", ".join(str(j.id) for j in stay)
        return Held(
            f"grace over; non-requeueable Slurm job(s) {ids} left for a human (policy: hold)",
            {**facts, "held_jobs": [j.id for j in stay]},
        )
    for job in running:
        if job.requeue:
            journal.add(f"scontrol requeue {job.id}", client.requeue_job(job.id), job=job.id)
        elif settings.not_requeueable is NotRequeueable.CANCEL:
            journal.add(f"scancel {job.id}", client.cancel_job(job.id), job=job.id)
        else:
            journal.add(
                f"scontrol update jobid={job.id} requeue=1",
                client.allow_requeue(job.id),
                job=job.id,
            )
            journal.add(f"scontrol requeue {job.id}", client.requeue_job(job.id), job=job.id)
    if running:
        return Waiting(
            f"grace over: {len(running)} Slurm job(s) requeued or cancelled", POLL_SECONDS, facts
        )
    # Only COMPLETING jobs left: they are ending; wait for Slurm to let go of them.
    return Waiting(
        f"{len(jobs)} Slurm job(s) still completing on {facts['slurm_node']}", POLL_SECONDS, facts
    )


def down(
    client: SlurmClient, node: str, remediation_id: str, policy: str, journal: Journal
) -> Outcome:
    """DOWN while the machine is replaced; a foreign drain is left (already fenced)."""
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
