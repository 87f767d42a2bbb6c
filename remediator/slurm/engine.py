"""The Slurm executor the remediation steps call when `slurm.enabled`: it maps the Kubernetes
node to its Slurm node, runs the step's Slurm action, and writes every command and answer on the
remediation's timeline (action `slurm`).

Fail safe: when slurmctld does not answer, the step waits with that reason (the planner keeps the
remediation where it is) and goes on when it answers again — a node whose jobs' fate is unknown
is never drained further or replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from remediator.actions.outcome import Done, Failed, Held, Outcome, Waiting
from remediator.errors import NotFoundError, TransientError
from remediator.kube.client import KubeClient
from remediator.slurm import steps
from remediator.slurm.client import SlurmClient
from remediator.slurm.settings import SlurmSettings
from remediator.store.records import RemediationRecord

UNREACHABLE_POLL_SECONDS = 5.0
Append = Callable[[int, str, Mapping[str, Any]], None]
# One Slurm node, or the Slurm nodes of an NVLink domain's trays acted on as one.
Where = str | list[str]
Action = Callable[[Where, steps.Journal], Outcome]


def each(action: Callable[[str, steps.Journal], Outcome]) -> Action:
    """A per-node action done on every node of a domain, the outcomes taken together."""

    def run(where: Where, journal: steps.Journal) -> Outcome:
        if isinstance(where, str):
            return action(where, journal)
        outcome = action(where[0], journal)
        for node in where[1:]:
            outcome = together(outcome, action(node, journal))
        return outcome

    return run


def both(first: Outcome, second: Callable[[], Outcome]) -> Outcome:
    """The Kubernetes side, then the Slurm side: Done only when both are."""
    if not isinstance(first, Done):
        return first
    after = second()
    if isinstance(after, Done):
        return Done(f"{first.detail}; {after.detail}", {**first.facts, **after.facts})
    return after


class SlurmSteps:
    def __init__(
        self, client: SlurmClient, settings: SlurmSettings, kube: KubeClient, append: Append
    ) -> None:
        self._client = client
        self._settings = settings
        self._kube = kube
        self._append = append

    # -- mapping -----------------------------------------------------------------------------

    def slurm_node(self, record: RemediationRecord) -> str:
        """From the timeline once known (the Kubernetes node may be gone), else the mapping."""
        for event in record.events:
            name = event.detail.get("slurm_node") if event.action == "slurm" else None
            # A domain's lines name all its nodes (a list): the lead's own is the mapping's.
            if isinstance(name, str) and name:
                return name
        return self.map_node(record.node)

    def map_node(self, kube_node: str) -> str:
        label = self._settings.node_label
        if label:
            try:
                value = self._kube.get_node(kube_node).labels.get(label)
            except NotFoundError:
                value = None
            if value:
                return value
        return self._settings.node_template.format(name=kube_node)

    # -- steps -------------------------------------------------------------------------------

    # `trays`: the Kubernetes nodes of a clique or domain remediation (steps/domain.py), whose
    # Slurm nodes are fenced, vacated, downed and resumed as one; empty for a node's own.

    def quarantine(self, record: RemediationRecord, trays: Sequence[str] = ()) -> Outcome:
        return self._run(
            record,
            "drain",
            each(
                lambda node, journal: steps.drain(
                    self._client, node, str(record.id), record.policy, journal
                )
            ),
            trays,
        )

    def opt_out(
        self,
        record: RemediationRecord,
        recorded: Callable[[Sequence[str]], Outcome] | None = None,
    ) -> Outcome:
        """`recorded` answers for the opt-outs recorded on the node's jobs (by job id)."""
        outcome = self._run(
            record,
            "opt-out check",
            each(lambda node, _: steps.check_opt_out(self._client, node, self._settings, recorded)),
        )
        # Unknown is not "no opt-out": hold (the opt-out hold shows the reason) until it answers.
        return Held(outcome.reason, outcome.facts) if isinstance(outcome, Waiting) else outcome

    def vacate(
        self,
        record: RemediationRecord,
        started_at: datetime,
        grace_seconds: float,
        now: datetime,
        trays: Sequence[str] = (),
        *,
        overridden: bool,
    ) -> Outcome:
        """A job whose node list spans several trays of the domain is requeued once (Debian's
        Slurm 22.05 has no block topology: the node list is what tells). `overridden`: on-call
        released the opt-out hold, so opted-out jobs go the way of the others."""
        so_far = jobs_so_far(record)
        return self._run(
            record,
            "checkpoint",
            lambda where, journal: steps.vacate(
                self._client,
                where,
                self._settings,
                so_far=so_far,
                started_at=started_at,
                grace_seconds=grace_seconds,
                now=now,
                journal=journal,
                overridden=overridden,
            ),
            trays,
        )

    def before_replace(self, record: RemediationRecord, trays: Sequence[str] = ()) -> Outcome:
        """DOWN, unless a job the timeline says was left running still runs there."""
        left = jobs_so_far(record).left_running
        return self._run(
            record,
            "down",
            each(
                lambda node, journal: steps.down(
                    self._client, node, str(record.id), record.policy, journal, left_running=left
                )
            ),
            trays,
        )

    def before_reboot(self, record: RemediationRecord, trays: Sequence[str] = ()) -> Outcome:
        """A reboot (or a rack's repair) kills the node's jobs as surely as DOWN: not while a
        job the timeline says was left running still runs there."""
        left = jobs_so_far(record).left_running

        def spare(where: Where, _: steps.Journal) -> Outcome:
            refused = steps.spare_left_running(self._client, where, left, "rebooting")
            return refused or Done("no Slurm job left running is in the way of the reboot")

        return self._run(record, "reboot", spare, trays)

    def after_verify(self, record: RemediationRecord, trays: Sequence[str] = ()) -> Outcome:
        return self._run(
            record,
            "resume",
            each(lambda node, journal: steps.resume(self._client, node, str(record.id), journal)),
            trays,
        )

    def release(self, record: RemediationRecord) -> Outcome:
        """On a cancel or a finished remediation: resume the node only if we drained it (and
        every tray's of a clique or domain it fenced)."""
        return self.after_verify(record, fenced_trays(record))

    # -- plumbing ----------------------------------------------------------------------------

    def _run(
        self,
        record: RemediationRecord,
        step: str,
        action: Action,
        trays: Sequence[str] = (),
    ) -> Outcome:
        node: Where = (
            [self.map_node(t) for t in trays] if len(trays) > 1 else self.slurm_node(record)
        )
        journal = steps.Journal()
        try:
            outcome = action(node, journal)
        except TransientError as exc:
            outcome = Waiting(
                f"holding the {step}: {exc}; the fate of the Slurm jobs on {node} is unknown "
                "until slurmctld answers",
                max(exc.delay, UNREACHABLE_POLL_SECONDS),
                {"slurm_node": node, "slurm_error": str(exc), "holding": True},
            )
        except NotFoundError as exc:
            outcome = Failed(f"Slurm {step}: {exc}", {"slurm_node": node})
        finally:
            for entry in journal.entries:
                self._append(record.id, "slurm", {"slurm_node": node, "step": step, **entry})
        return outcome


def fenced_trays(record: RemediationRecord) -> list[str]:
    """The trays the quarantine step fenced together (a clique or domain); empty otherwise."""
    for event in record.events:
        trays = event.detail.get("trays") if event.action == "quarantine_done" else None
        if isinstance(trays, list):
            return [str(t) for t in trays]
    return []


def jobs_so_far(record: RemediationRecord) -> steps.JobsSoFar:
    """What the remediation already did to its Slurm jobs, from its `slurm` timeline lines."""
    return steps.JobsSoFar.read(e.detail for e in record.events if e.action == "slurm")


def together(first: Outcome, second: Outcome) -> Outcome:
    """Two sides of one step run side by side (pods' checkpoints, Slurm's jobs): the step is Done
    when both are; a hold or failure of either wins; else wait for the sooner retry."""
    for outcome in (first, second):
        if isinstance(outcome, Held | Failed):
            return outcome
    if isinstance(first, Done) and isinstance(second, Done):
        return Done(f"{first.detail}; {second.detail}", {**first.facts, **second.facts})
    waits = [o for o in (first, second) if isinstance(o, Waiting)]
    retry = min(w.retry_after for w in waits)
    reason = "; ".join(w.reason for w in waits)
    facts: dict[str, Any] = {}
    for outcome in (first, second):
        facts.update(outcome.facts)
    return Waiting(reason, retry, facts)
