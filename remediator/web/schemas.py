"""The JSON API's shapes, so that /openapi.json documents every answer (and schemathesis can
check them)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema

from remediator.model.states import State
from remediator.policy.durations import Duration
from remediator.signals.model import Signal
from remediator.store.records import ControllerStatus
from remediator.web.agent_views import AgentOut
from remediator.web.pending import PendingOut

# No control characters: PostgreSQL refuses NUL in text, and nothing legitimate needs them.
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
# PRINTABLE with something to say: a reason of only spaces is none.
SAID = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"


class ErrorOut(BaseModel):
    reason: str
    detail: Any = None


class EventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    from_state: State | None
    to_state: State | None
    action: str
    detail: dict[str, Any]
    actor: str


class NextActionOut(BaseModel):
    command: str
    effect: str = Field(description="what the command would do to the node, in plain words")


class RemediationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    cluster: str = Field(description="the cluster whose controller owns it")
    node: str
    pool: str | None
    policy: str
    policy_priority: int
    policy_commit: str | None
    policy_hash: str | None
    state: State
    dry_run: bool
    approval_required: bool
    reason: str
    signal_kind: str
    xid_code: int | None
    signals: list[Signal]
    ladder: list[dict[str, Any]]
    step_index: int
    replacement_operation_id: str | None
    new_node: str | None
    outcome: str | None = Field(
        default=None,
        description="once succeeded: repaired (back in service) or replaced (a new node)",
    )
    hold_reason: str | None
    queue_cause: str | None = Field(
        default=None, description="while queued: what holds it (budget, breaker or pause)"
    )
    suppressed_until: datetime | None = Field(
        default=None, description="after a human's cancel: no re-remediation of this fault before"
    )
    error: str | None
    attempts: int
    next_attempt_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    duration_seconds: float = Field(description="detection to finish, or to now while open")
    runbook_url: str | None = None
    current_step: int | None = Field(
        default=None,
        description="index into `ladder` of the rung being executed, held or failed; this and "
        "the next two fields are filled where the timeline is read (one remediation, the "
        "waiting list), not in pages of the list",
    )
    needs_human: str | None = Field(
        default=None, description="why a human must act (held, awaiting approval or failed)"
    )
    next_actions: list[NextActionOut] = Field(default_factory=list)


class PodOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    pod: str
    checkpoint: str
    drain: str
    sigterm_at: str
    note: str


class SlurmJobOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    job: str = Field(description="as Slurm addresses it: 12, 8_3 (array task), 20+1 (het job)")
    slurm_node: str
    commands: list[str]
    fate: str | None = Field(
        default=None,
        description="what became of it: requeued, ended with its exit state, cancelled, or "
        "left running (opt-out, or not requeueable under `hold`); null while undecided",
    )


class PolicySourceOut(BaseModel):
    file: str
    commit: str | None
    content_hash: str
    yaml: str


class RemediationDetailOut(RemediationOut):
    events: list[EventOut]
    pods: list[PodOut]
    slurm_jobs: list[SlurmJobOut] = []
    policy_source: PolicySourceOut | None
    xid_explanation: str | None
    gpu_hours_out_of_service: float | None = Field(
        default=None,
        description="the node's GPUs times quarantine to back in service (to now while out); "
        "null when it was not quarantined or reported no GPU count",
    )
    gpu_hours_disrupted: float | None = Field(
        default=None,
        description="each evicted pod's GPUs times eviction until a replacement of the same "
        "owner ran (a pod without owner, or not yet replaced: until the remediation ended, or "
        "now); null when it was not quarantined",
    )
    pending: PendingOut | None = Field(
        default=None,
        description="a human's command the owning cluster's controller has not acted on yet",
    )


class RemediationPageOut(BaseModel):
    items: list[RemediationOut]
    next_cursor: str | None


# A row that concerns no remediation leaves the field out rather than null: a link from it
# (to /remediations/{remediation_id}) then leads nowhere instead of to /remediations/None.
OptionalRemediationId = Annotated[
    int | None,
    WithJsonSchema({"type": "integer", "description": "absent when no remediation is concerned"}),
    Field(exclude_if=lambda value: value is None),
]


class SignalEntryOut(BaseModel):
    id: int
    remediation_id: OptionalRemediationId = None
    signal: Signal
    value_text: str = Field(default="", description="the value with its unit, as shown")
    disposition: str | None = Field(
        default=None,
        description="what became of it: opened #N, queued #N, joined #N, folded, in cooldown "
        "until T, suppressed by cancel #N, below threshold, no policy matches, …",
    )


class NodeStatusOut(BaseModel):
    """The node as the cluster has it now; `error` says why that could not be read."""

    found: bool
    ready: bool | None = None
    cordoned: bool | None = None
    taints: list[str] = Field(default_factory=list)
    pool: str | None = None
    gpus: int | None = None
    gpu_product: str | None = None
    problems: list[str] = Field(
        default_factory=list, description="conditions other than Ready that are not False"
    )
    error: str | None = None


class NodeLinkOut(BaseModel):
    remediation_id: int
    node: str


class NodeOut(BaseModel):
    node: str
    repeat_offender: bool
    remediations_in_window: int = Field(description="within the repeat rule's window")
    repeat_rule: str
    status: NodeStatusOut
    window_from: datetime
    window_to: datetime
    remediations: list[RemediationOut]
    remediations_total: int = Field(description="in the time window, across all pages")
    remediations_next: str | None = Field(description="pass as `remediations_cursor`")
    signals: list[SignalEntryOut]
    signals_total: int = Field(description="in the time window, across all pages")
    signals_next: str | None = Field(description="pass as `signals_cursor`")
    replacement_of: NodeLinkOut | None = Field(
        description="the node this one replaced, and the remediation that did it"
    )
    replaced_by: list[NodeLinkOut] = Field(description="nodes that replaced this one")
    agent: AgentOut | None = None  # None: no node agent ever reported from this node


class PolicyOut(BaseModel):
    name: str
    description: str
    why: str
    kind: str
    priority: int
    approval: str
    dry_run: bool
    actions: list[str]
    file: str | None
    yaml: str | None


class PolicySetOut(BaseModel):
    commit: str | None
    dirty: bool
    content_hash: str
    loaded_at: datetime
    warnings: list[str]
    settings: dict[str, Any]
    policies: list[PolicyOut]


class PoliciesOut(BaseModel):
    active: PolicySetOut | None
    last_error: list[str] | None


class ControllerOut(BaseModel):
    """The store keeps the last pause *or* resume in one set of fields; here they are told
    apart, so a running controller does not report a pause's reason."""

    model_config = ConfigDict(from_attributes=True)

    paused: bool
    paused_by: str | None = Field(description="set while paused")
    paused_at: datetime | None
    pause_reason: str | None
    resumed_by: str | None = Field(default=None, description="set after a resume")
    resumed_at: datetime | None = None
    resume_reason: str | None = None
    breaker_tripped: bool
    breaker_reason: str | None
    breaker_tripped_at: datetime | None
    breaker_reset_by: str | None
    breaker_reset_at: datetime | None
    breaker_reset_reason: str | None
    leader_identity: str | None
    leader_seen_at: datetime | None

    @classmethod
    def of(cls, status: ControllerStatus) -> ControllerOut:
        out = cls.model_validate(status)
        if out.paused:
            return out
        return out.model_copy(
            update={
                "paused_by": None,
                "paused_at": None,
                "pause_reason": None,
                "resumed_by": out.paused_by,
                "resumed_at": out.paused_at,
                "resume_reason": out.pause_reason,
            }
        )


class SourceOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    source: str
    up: bool
    checked_at: datetime
    last_success_at: datetime | None
    error: str | None


class OverviewOut(BaseModel):
    in_flight: int
    awaiting_approval: int
    held_by_opt_out: int
    held: int
    failed_last_24h: int
    by_state: dict[str, int]
    open_by_pool: dict[str, int]
    repaired: int = Field(default=0, description="succeeded in the last 7 days, node returned")
    replaced: int = Field(default=0, description="succeeded in the last 7 days, node replaced")
    spares_saved: int = Field(
        default=0, description="replacements not needed because the node was repaired (7 days)"
    )
    controller: ControllerOut
    sources: list[SourceOut]
    agents_reporting: int = 0
    silent_agents: list[AgentOut] = Field(default_factory=list)
    gpu_hours_out_of_service_by_policy: dict[str, float] = Field(
        default_factory=dict,
        description="GPUs times quarantine to back in service (to now while out), over the "
        "last 14 days, by policy",
    )
    gpu_hours_disrupted_by_policy: dict[str, float] = Field(
        default_factory=dict,
        description="evicted pods' GPUs times eviction until their replacements ran, over the "
        "last 14 days, by policy",
    )


DURATION_DIGITS = r"\d{1,6}"
_D = DURATION_DIGITS
# What parse_duration reads (units in descending order, at least one), bounded so that no value
# the schema allows overflows a timedelta.
DURATION_PATTERN = (
    rf"^(?:{_D}d(?:{_D}h)?(?:{_D}m)?(?:{_D}s)?|{_D}h(?:{_D}m)?(?:{_D}s)?|{_D}m(?:{_D}s)?|{_D}s)$"
)
ApiDuration = Annotated[
    Duration,
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "examples": ["90s", "1h30m"]}),
]


class CommandIn(BaseModel):
    """approve, release, retry: a reason and nothing else."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=500, pattern=PRINTABLE)


class CancelIn(CommandIn):
    cooldown: ApiDuration | None = Field(
        default=None,
        description="how long no policy may remediate the node for the same fault "
        "(default 1h; 0s lets them at once)",
    )


class ControllerCommandIn(BaseModel):
    """pause, resume: the reason, required."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=500, pattern=PRINTABLE)


class ResetBreakerIn(ControllerCommandIn):
    drop_queued: StrictBool = Field(
        default=False,
        description="cancel the remediations the breaker queued instead of admitting them",
    )


class HealthOut(BaseModel):
    status: str
    problems: list[str] = []
    sources_down: list[str] = Field(
        default_factory=list,
        description="signal sources that do not answer: reported, but not a reason to be unready",
    )


class LiveOut(BaseModel):
    version: str = Field(description="changes whenever a page could show something new")


class AuditOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    actor: str
    token_id: str = Field(description="the token's fingerprint (first 8 hex of its SHA-256)")
    source: str = Field(description="the client address the command came from")
    command: str
    remediation_id: OptionalRemediationId = None
    reason: str | None
    outcome: str = Field(description="done, refused or not_found")
    detail: str | None


class AuditPageOut(BaseModel):
    items: list[AuditOut]
    next_before: int | None = Field(description="pass as `before` for the next (older) page")
