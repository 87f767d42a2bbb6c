"""What every step executor is given: the systems it may touch and the remediation's helpers
read from its timeline. One signature for all steps (record, ladder step, context → outcome) so a
new step is a new module and a row in the table (steps/__init__.py), not a branch in the service.

Executors live here rather than in actions/ because they need the ladder walk and the timeline
(remediation/planner.py, journal.py), the repository and Slurm: actions/ keeps the idempotent
primitives (quarantine, drain, a Job, a provider request) that the executors call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from remediator.actions.drain import Drainer
from remediator.actions.jobs import DEFAULT_TEMPLATE, JobSettings
from remediator.actions.outcome import Outcome
from remediator.actions.quarantine import Why
from remediator.clock import Clock
from remediator.fences.fencer import DirectFencer, Fencer
from remediator.kube.client import KubeClient
from remediator.model.states import State
from remediator.policy.ladder import LadderStep
from remediator.providers.base import NodePoolProvider
from remediator.remediation.journal import entered_at
from remediator.rma.evidence import HardwareSource
from remediator.rma.webhook import RmaWebhook
from remediator.slurm.engine import SlurmSteps
from remediator.store.records import EventRecord, RemediationRecord
from remediator.store.repository import Repository

DEFAULT_JOBS = JobSettings(
    "remediator",
    "remediator-repair",
    "nvcr.io/nvidia/cloud-native/dcgm:3.3.5-1-ubuntu22.04",
    DEFAULT_TEMPLATE,
)


@dataclass
class StepContext:
    repo: Repository
    kube: KubeClient
    provider: NodePoolProvider
    clock: Clock
    actor: str
    drainer: Drainer
    jobs: JobSettings = DEFAULT_JOBS
    repair_poll: float = 2.0
    slurm: SlurmSteps | None = None
    # Which kind of provider serves a pool (http, aws, clusterapi, gce): the DOA figures' label.
    provider_kind: Callable[[str | None], str] = lambda _pool: ""
    # The node label naming a node's pool (settings `pool_label`): the two-node check's peers.
    pool_label: str = ""
    # The RMA step: where cases are posted (None: console only) and what the ledger knows of
    # the hardware (None: the bundle carries what the signals reported).
    rma_webhook: RmaWebhook | None = None
    hardware: HardwareSource | None = None
    # The hold reason when the machine behind a node is quarantined (remediation/
    # machine_hold.py): uncordon and verify leave such a node fenced.
    machine_hold: Callable[[str], str | None] = lambda _node: None
    # How a step fences or lifts a fence (fences/fencer.py): the fence owner, in the controller.
    fencer: Fencer | None = None
    # (remediation, entry into the step) whose spare capacity was checked already.
    capacity_checked: set[tuple[int, datetime]] = field(default_factory=set)

    def slurm_for(self, record: RemediationRecord) -> SlurmSteps | None:
        """Slurm only when `slurm.enabled`, and never in a dry run."""
        return None if record.dry_run else self.slurm

    def why(self, record: RemediationRecord, signal: str) -> Why:
        """Whose fence this is, as its marks say (the remediation and its policy; the owner adds
        this store's identity)."""
        return Why(str(record.id), record.policy, signal)

    @property
    def fences(self) -> Fencer:
        return self.fencer if self.fencer is not None else DirectFencer(self.kube)

    def entered(self, record: RemediationRecord) -> datetime:
        return entered_at(record, record.state)


Executor = Callable[[RemediationRecord, LadderStep, StepContext], Outcome]


@dataclass(frozen=True)
class StepExecutor:
    """A row of the step table: the timeline/ladder name of the work done in a state."""

    name: str
    run: Executor


def attempt_of(record: RemediationRecord, step: str) -> int:
    """Which try of `step` this is: a human's retry after a failure runs a new Job."""
    return sum(1 for e in record.events if e.action == f"{step}_failed")


def faulty_gpus(record: RemediationRecord) -> list[int]:
    return sorted({s.gpu for s in record.signals if s.gpu is not None})


def signal_text(record: RemediationRecord) -> str:
    if not record.signals:
        return record.signal_kind
    first = record.signals[0]
    text = first.kind.value if first.code is None else f"{first.kind.value} {first.code}"
    if first.gpu is not None:
        text += f" on GPU {first.gpu}"
    return text


def replacement_key(record: RemediationRecord) -> str:
    """One key per replacement attempt: the same after a crash, a new one after a failed
    operation was retried by a human (the provider would answer the failed one again) or after
    the last new machine failed its validation (a new request for a new machine)."""
    failures = sum(1 for e in record.events if e.action == "replacement_failed")
    again = sum(1 for e in record.events if e.action == "validate_failed" and e.to_state)
    return f"{record.idempotency_key}-{failures}" + (f"-v{again}" if again else "")


def replaced_node(record: RemediationRecord) -> str:
    """The machine the current replacement takes out: the last new machine that failed its
    validation, else the node the remediation is about."""
    for event in reversed(record.events):
        if event.action == "validate_failed" and event.detail.get("replaced_again"):
            return str(event.detail["replaced_again"])
    return record.node


def replacements(record: RemediationRecord) -> int:
    """Replacements this remediation has had (each brought a new machine)."""
    return sum(1 for e in record.events if e.action == "replace_done" and e.to_state)


def reboot_request(record: RemediationRecord) -> EventRecord | None:
    """The reboot asked for since the remediation last entered REBOOTING (its boot id before)."""
    since = entered_at(record, State.REBOOTING)
    for event in reversed(record.events):
        if event.action == "reboot_requested" and event.at >= since:
            return event
    return None
