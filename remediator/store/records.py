"""What the repository hands out: frozen values, so callers never hold a session or a live row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple

from remediator.model.disruption import Eviction
from remediator.model.states import OPEN, State
from remediator.signals.model import Signal


@dataclass(frozen=True)
class NewRemediation:
    """A decision about to become durable; `signal_kind` and `xid_code` default to the first
    signal's."""

    node: str
    policy: str
    reason: str
    signals: Sequence[Signal]
    ladder: Sequence[Mapping[str, Any]]
    pool: str | None = None
    policy_priority: int = 0
    policy_commit: str | None = None
    policy_hash: str | None = None
    dry_run: bool = False
    approval_required: bool = False
    idempotency_key: str | None = None
    signal_kind: str | None = None
    xid_code: int | None = None
    while_queued: str | None = None


@dataclass(frozen=True)
class EventRecord:
    id: int
    remediation_id: int
    at: datetime
    from_state: State | None
    to_state: State | None
    action: str
    detail: Mapping[str, Any]
    actor: str


@dataclass(frozen=True)
class RemediationRecord:
    id: int
    cluster: str
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
    signals: tuple[Signal, ...]
    ladder: tuple[Mapping[str, Any], ...]
    step_index: int
    idempotency_key: str
    replacement_operation_id: str | None
    new_node: str | None
    hold_reason: str | None
    error: str | None
    attempts: int
    next_attempt_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    events: tuple[EventRecord, ...] = ()
    queue_cause: str | None = None
    while_queued: str | None = None
    suppressed_until: datetime | None = None
    outcome: str | None = None  # "repaired" or "replaced" once succeeded

    @property
    def disruptive(self) -> bool:
        """Whether its ladder takes the node out of service (what the budgets count)."""
        return any(step.get("action") != "notify" for step in self.ladder)

    @property
    def priority(self) -> int:
        return self.policy_priority

    @property
    def is_open(self) -> bool:
        return self.state in OPEN


@dataclass(frozen=True)
class RemediationFilter:
    """The console's filters; every field left at its default does not filter.

    `node` matches exactly, `node_search` is a case-insensitive substring; the time range is
    [created_from, created_to). `in_flight_first` lists open remediations before the rest.
    `finished_from` keeps those that finished (succeeded, failed, cancelled) at or after it;
    `outcome` those that succeeded as "repaired" or "replaced".
    """

    node: str | None = None
    node_search: str | None = None
    pool: str | None = None
    states: frozenset[State] = frozenset()
    signal_kind: str | None = None
    xid_code: int | None = None
    policy: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    dry_run: bool | None = None
    in_flight_first: bool = False
    finished_from: datetime | None = None
    outcome: str | None = None


class Page(NamedTuple):
    rows: tuple[RemediationRecord, ...]
    next_cursor: str | None


@dataclass(frozen=True)
class SignalEntry:
    id: int
    signal: Signal
    remediation_id: int | None
    disposition: str | None = None  # what became of it (opened #N, folded, …)


@dataclass(frozen=True)
class NodeHistory:
    node: str
    remediations: tuple[RemediationRecord, ...]
    signals: tuple[SignalEntry, ...]


@dataclass(frozen=True)
class PolicySetRecord:
    id: int
    content_hash: str
    commit: str | None
    dirty: bool
    status: str  # "ok" | "refused"
    loaded_at: datetime
    files: Mapping[str, str]
    error: str | None


@dataclass(frozen=True)
class ControllerStatus:
    """`paused_by`, `paused_at` and `pause_reason` describe the last pause or resume."""

    cluster: str
    paused: bool = False
    paused_by: str | None = None
    paused_at: datetime | None = None
    pause_reason: str | None = None
    breaker_tripped: bool = False
    breaker_reason: str | None = None
    breaker_tripped_at: datetime | None = None
    breaker_reset_by: str | None = None
    breaker_reset_at: datetime | None = None
    breaker_reset_reason: str | None = None
    breaker_faults: tuple[tuple[str, datetime], ...] = ()
    leader_identity: str | None = None
    leader_seen_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class SourceStatus:
    source: str
    up: bool
    checked_at: datetime
    last_success_at: datetime | None
    error: str | None


@dataclass(frozen=True, slots=True)
class AgentStatus:
    """A node agent's newest heartbeat. Silent means its node's health is unknown: nothing the
    agent would have reported (an XID, a vanished GPU) can be ruled out."""

    node: str
    agent: str
    version: str
    started_at: datetime
    seen_at: datetime
    stats: Mapping[str, Any] = field(default_factory=dict)

    def silent(self, now: datetime, after: timedelta) -> bool:
        return now - self.seen_at > after


@dataclass(frozen=True)
class DailyCount:
    day: date
    signal_kind: str
    count: int


@dataclass(frozen=True)
class Percentiles:
    count: int
    median_seconds: float
    p90_seconds: float


@dataclass(frozen=True)
class RepairTimes:
    """Detection to success overall, and how long remediations stayed in each state."""

    overall: Percentiles | None
    by_step: Mapping[str, Percentiles] = field(default_factory=dict)


@dataclass(frozen=True)
class Overview:
    """`by_state` counts every open remediation, and finished ones from the recent window;
    `failed_last_24h` those failed now whose failure came within the last 24 hours."""

    by_state: Mapping[State, int]
    failed_last_24h: int
    open_by_pool: Mapping[str, int]
    # Succeeded within the window, by outcome: "repaired" nodes went back into service, so each
    # is a spare node not spent; "replaced" ones took a spare.
    by_outcome: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class QuarantineSpan:
    """How long a remediation kept a node out of service: from the quarantine to the end
    (succeeded: the node or its replacement is back; cancelled: released), or None while it
    still holds the node (open, or failed). `gpus` as the quarantine counted them;
    `evictions` the pods it evicted, for the GPU-hours of workload it disrupted."""

    remediation_id: int
    policy: str
    node: str
    quarantined_at: datetime
    gpus: int | None
    ended_at: datetime | None
    evictions: tuple[Eviction, ...] = ()
