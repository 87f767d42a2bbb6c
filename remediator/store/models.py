"""The durable record: remediations, their append-only timelines, observed signals, the policy
versions they were decided under, and per-cluster controller state.

Every table carries `cluster` so that one PostgreSQL can serve many clusters. Timestamps are
aware UTC on both backends; JSON is JSONB on PostgreSQL and plain JSON on SQLite. The indexes are
shaped for the console's keyset-paginated filters at millions of rows.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    column,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from remediator.model.states import OPEN

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Sorted so that the partial-index predicates render identically on every run (no drift).
OPEN_STATES: tuple[str, ...] = tuple(sorted(s.value for s in OPEN))

# SQLite only auto-increments an INTEGER PRIMARY KEY, not a BIGINT one.
BigId = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC, returns aware UTC: SQLite keeps no zone, so a naive value read back is UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store only takes aware datetimes")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def exists_on(dialect_name: str, item: object) -> bool:
    """Whether a schema item declared with `ddl_if(dialect=...)` belongs on this backend, for
    autogenerate comparisons (Alembic does not read ddl_if itself)."""
    condition = getattr(item, "_ddl_if", None)
    if condition is None or condition.dialect is None:
        return True
    wanted = (condition.dialect,) if isinstance(condition.dialect, str) else condition.dialect
    return dialect_name in wanted


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _open_predicate() -> ColumnElement[bool]:
    return column("state").in_(OPEN_STATES)


class Remediation(Base):
    __tablename__ = "remediations"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    pool: Mapped[str | None] = mapped_column(String(128))
    policy: Mapped[str] = mapped_column(String(128))
    policy_priority: Mapped[int] = mapped_column(Integer, default=0)
    policy_commit: Mapped[str | None] = mapped_column(String(64))
    policy_hash: Mapped[str | None] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32))
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    approval_required: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str] = mapped_column(Text)
    signal_kind: Mapped[str] = mapped_column(String(32))
    xid_code: Mapped[int | None] = mapped_column(Integer)
    signals: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    ladder: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    step_index: Mapped[int] = mapped_column(Integer, default=0)
    idempotency_key: Mapped[str] = mapped_column(String(64), unique=True)
    replacement_operation_id: Mapped[str | None] = mapped_column(String(256))
    new_node: Mapped[str | None] = mapped_column(String(253))
    hold_reason: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Queued: why it waits ("budget", "breaker", "pause") and what the node gets meanwhile.
    queue_cause: Mapped[str | None] = mapped_column(String(16))
    while_queued: Mapped[str | None] = mapped_column(String(16))
    # A human's cancel: no policy re-remediates this node for the same fault before then.
    suppressed_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # How a succeeded remediation ended: "repaired" (the node went back into service) or
    # "replaced" (a new node took its place); None otherwise.
    outcome: Mapped[str | None] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_remediations_cluster_created", "cluster", created_at.desc(), id.desc()),
        Index("ix_remediations_cluster_node", "cluster", "node", "created_at"),
        Index("ix_remediations_cluster_pool", "cluster", "pool", "created_at"),
        Index("ix_remediations_cluster_state", "cluster", "state", "created_at"),
        Index("ix_remediations_cluster_policy", "cluster", "policy", "created_at"),
        Index("ix_remediations_cluster_signal_kind", "cluster", "signal_kind", "created_at"),
        Index("ix_remediations_cluster_xid", "cluster", "xid_code", "created_at"),
        # The node page's "replacement of" link: which remediation brought this node in.
        Index("ix_remediations_cluster_new_node", "cluster", "new_node"),
        # Time to repair reads the newest succeeded remediations by finish time.
        Index("ix_remediations_cluster_state_finished", "cluster", "state", "finished_at"),
        Index("ix_remediations_cluster_suppressed", "cluster", "suppressed_until"),
        # Substring search on node names without scanning the table (PostgreSQL's pg_trgm).
        Index(
            "ix_remediations_node_trgm",
            "node",
            postgresql_using="gin",
            postgresql_ops={"node": "gin_trgm_ops"},
        ).ddl_if(dialect="postgresql"),
        # The race guard: at most one open remediation per node, whoever inserts first wins.
        Index(
            "uq_remediations_open_node",
            "cluster",
            "node",
            unique=True,
            postgresql_where=_open_predicate(),
            sqlite_where=_open_predicate(),
        ),
        # Serves list_open() and "in flight first" without touching the closed millions.
        Index(
            "ix_remediations_open",
            "cluster",
            created_at.desc(),
            id.desc(),
            postgresql_where=_open_predicate(),
            sqlite_where=_open_predicate(),
        ),
    )


class RemediationEvent(Base):
    """One line of a remediation's timeline; never updated or deleted once written."""

    __tablename__ = "remediation_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    remediation_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("remediations.id", ondelete="RESTRICT")
    )
    cluster: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str | None] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(Json)
    actor: Mapped[str] = mapped_column(String(256))

    __table_args__ = (
        Index("ix_remediation_events_remediation", "remediation_id", "at", "id"),
        Index("ix_remediation_events_cluster_to_state", "cluster", "to_state", "at"),
    )


class ObservedSignal(Base):
    """Signals as observed, for the node page; kept apart from the copies inside remediations."""

    __tablename__ = "signals"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    gpu: Mapped[int | None] = mapped_column(Integer)
    gpu_uuid: Mapped[str | None] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32))
    code: Mapped[int | None] = mapped_column(Integer)
    value: Mapped[float | None] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(64))
    observed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    labels: Mapped[dict[str, str]] = mapped_column(Json)
    remediation_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("remediations.id", ondelete="SET NULL")
    )
    # What became of it: opened #N, joined #N, folded, in cooldown until T, … (None: older rows)
    disposition: Mapped[str | None] = mapped_column(String(512))

    __table_args__ = (Index("ix_signals_cluster_node_observed", "cluster", "node", "observed_at"),)


class PolicySet(Base):
    """A policy set as loaded (or refused), so any remediation's policy text can be shown."""

    __tablename__ = "policy_sets"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    content_hash: Mapped[str] = mapped_column(String(64))
    commit: Mapped[str | None] = mapped_column(String(64))
    dirty: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(String(16))
    loaded_at: Mapped[datetime] = mapped_column(UTCDateTime)
    files: Mapped[dict[str, str]] = mapped_column(Json)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_policy_sets_cluster_hash", "cluster", "content_hash", "loaded_at"),
        Index("ix_policy_sets_cluster_loaded", "cluster", "loaded_at"),
    )


class ControllerState(Base):
    """Pause and breaker switches; `paused_by/at` and `pause_reason` describe the last pause or
    resume."""

    __tablename__ = "controller_state"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    paused_by: Mapped[str | None] = mapped_column(String(256))
    paused_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    pause_reason: Mapped[str | None] = mapped_column(Text)
    breaker_tripped: Mapped[bool] = mapped_column(Boolean, default=False)
    breaker_reason: Mapped[str | None] = mapped_column(Text)
    breaker_tripped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    breaker_reset_by: Mapped[str | None] = mapped_column(String(256))
    breaker_reset_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    breaker_reset_reason: Mapped[str | None] = mapped_column(Text)
    # The breaker's fault window, [[node, first seen (ISO)], ...]: durable, so a restart or a
    # failover mid-storm keeps the count.
    breaker_faults: Mapped[list[list[str]] | None] = mapped_column(Json)
    leader_identity: Mapped[str | None] = mapped_column(String(256))
    leader_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SourceHealth(Base):
    __tablename__ = "source_health"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    source: Mapped[str] = mapped_column(String(64), primary_key=True)
    up: Mapped[bool] = mapped_column(Boolean)
    checked_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)


class AgentHeartbeat(Base):
    """The newest heartbeat of each node's agent: any replica records it, every replica reads
    it, so a silent agent shows on whichever console on-call opens."""

    __tablename__ = "agent_heartbeats"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    agent: Mapped[str] = mapped_column(String(256))
    version: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    stats: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)


class ArchivedSignal(Base):
    """Every signal the controller received, as runs: one row per (node, GPU, kind, code, source,
    labels) reading that repeated unchanged at consecutive cycles of its source, from `first_at`
    to `last_at` (cycle times; NULL when it came once). `observed_at` is the first reading's own
    time; each later reading lay as far before its cycle (`step_us` NULL) or `step_us` after the
    one before (samples evenly spaced, polls not), so a replay rebuilds each reading's time
    exactly. `lag_ms` is the first reading's lag (rows from before `observed_at` have only it).
    An `open` run is still going: it has a reading at every cycle of its source since
    `first_at` (`last_at` and `readings` are filled in when it ends)."""

    __tablename__ = "signal_archive"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    gpu: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    code: Mapped[int | None] = mapped_column(Integer)
    value: Mapped[float | None] = mapped_column(Float)
    source: Mapped[str] = mapped_column(String(64))
    label_set: Mapped[int | None] = mapped_column(BigInteger)
    first_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    readings: Mapped[int] = mapped_column(Integer, default=1)
    lag_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    observed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    step_us: Mapped[int | None] = mapped_column(BigInteger)
    open: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    __table_args__ = (
        Index("ix_signal_archive_cluster_first", "cluster", "first_at"),
        Index("ix_signal_archive_cluster_key", "cluster", "node", "gpu", "kind", "first_at"),
        # A backtest reads only the readings beyond a threshold: a range on value per kind.
        Index("ix_signal_archive_cluster_kind_value", "cluster", "kind", "value"),
    )


class ArchivedLabelSet(Base):
    """Signal labels (and GPU UUID) stored once and referenced by digest: DCGM series repeat the
    same half-dozen labels on every reading."""

    __tablename__ = "signal_label_sets"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    digest: Mapped[str] = mapped_column(String(64))
    gpu_uuid: Mapped[str | None] = mapped_column(String(128))
    labels: Mapped[dict[str, str]] = mapped_column(Json)

    __table_args__ = (
        Index("uq_signal_label_sets_cluster_digest", "cluster", "digest", unique=True),
    )


class ArchivedCycle(Base):
    """One intake cycle in which `source` delivered signals: the times a run's readings came."""

    __tablename__ = "signal_cycles"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    source: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)


class ArchivedNode(Base):
    """A node's pool, labels and health as the intake saw them, one row per change: budgets and
    node selectors of a replay need the inventory of the time."""

    __tablename__ = "signal_archive_nodes"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    present: Mapped[bool] = mapped_column(Boolean)
    pool: Mapped[str] = mapped_column(String(128))
    labels: Mapped[dict[str, str]] = mapped_column(Json)
    ready: Mapped[bool] = mapped_column(Boolean)
    cordoned: Mapped[bool] = mapped_column(Boolean)

    __table_args__ = (Index("ix_signal_archive_nodes_cluster_at", "cluster", "at"),)


class AuditEntry(Base):
    """One human command as it was asked, whatever came of it: who (the name they gave and
    the token's fingerprint, never the token), from where, why and when. Never updated or
    deleted once written (triggers refuse it), so pause and resume keep their history."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    actor: Mapped[str] = mapped_column(String(256))
    token_id: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(64))
    command: Mapped[str] = mapped_column(String(32))
    remediation_id: Mapped[int | None] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_audit_log_cluster_at", "cluster", "at", "id"),
        Index("ix_audit_log_cluster_remediation", "cluster", "remediation_id", "at"),
    )


class WebSession(Base):
    """A console login: the browser holds a random id, this row holds only its hash, the
    token's fingerprint and role, so a stolen database or cookie never yields a token, and
    logging out revokes the id for good."""

    __tablename__ = "web_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    token_id: Mapped[str] = mapped_column(String(16))
    role: Mapped[str] = mapped_column(String(16))
    name: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_web_sessions_expires", "expires_at"),)


class StoreIdentity(Base):
    """This database's own id, written once with the schema (migration 0016): every fence mark
    names it, so a mark another database wrote is never taken for ours."""

    __tablename__ = "store_identity"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    store_id: Mapped[str] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FenceDecision(Base):
    """An operator's decision on a node's fence (fence, release, adopt), with who and why; never
    updated. The fence owner (remediator/fences/) reads the newest per node."""

    __tablename__ = "fence_decisions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    action: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(256))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    # A foreign fence's marks as they were when adopted or released (JSON text).
    mark: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_fence_decisions_cluster_node", "cluster", "node", "id"),)


class ClusterIdentity(Base):
    """Who owns a cluster name in a shared database: the UID of that cluster's `kube-system`
    namespace, recorded by the first controller that started under the name. Two clusters both
    called "prod" would otherwise mix their histories under one `cluster` value."""

    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    kube_system_uid: Mapped[str] = mapped_column(String(64))
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    registered_by: Mapped[str] = mapped_column(String(256))

    __table_args__ = (Index("uq_clusters_kube_system_uid", "kube_system_uid", unique=True),)


class OptOut(Base):
    """A person's request that the remediation leave a node (or a pod's or Slurm job's node)
    alone until `until`, with who and why (issue #27). Removal and the noticed expiry are
    stamped on the row; the audit log keeps each of them as its own entry."""

    __tablename__ = "opt_outs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    scope: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(320))
    actor: Mapped[str] = mapped_column(String(256))
    reason: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    until: Mapped[datetime] = mapped_column(UTCDateTime)
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    removed_by: Mapped[str | None] = mapped_column(String(256))
    expired_noted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_opt_outs_cluster_scope_target", "cluster", "scope", "target"),)


class FleetBreaker(Base):
    """The fleet-wide breaker, one row for the whole shared database: tripped by whichever
    controller first sees the fleet's fault window over its limit, reset only by a human."""

    __tablename__ = "fleet_breaker"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    tripped: Mapped[bool] = mapped_column(Boolean, default=False)
    tripped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    tripped_by: Mapped[str | None] = mapped_column(String(128))  # the cluster that saw it first
    reason: Mapped[str | None] = mapped_column(Text)
    reset_by: Mapped[str | None] = mapped_column(String(256))
    reset_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reset_reason: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FleetFault(Base):
    """A node newly faulted, as its cluster's controller counted it for the fleet breaker's
    shared window (rows older than the window are pruned by the controller that writes)."""

    __tablename__ = "fleet_faults"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_fleet_faults_at", "at"),)


class FleetNodeCount(Base):
    """Each taking-part cluster's node count: the fleet breaker's denominator."""

    __tablename__ = "fleet_node_counts"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    nodes: Mapped[int] = mapped_column(Integer)
    at: Mapped[datetime] = mapped_column(UTCDateTime)


class FleetRollupDay(Base):
    """How far one cluster's day is rolled up: of its remediations detected before
    `covered_until`, the finished ones are in the rows below and the open ones' ids in
    `pending`, which each read computes afresh. Reopening a finished remediation (a retry)
    deletes its day's marker, so the day is built again."""

    __tablename__ = "fleet_rollup_days"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    pending: Mapped[list[int]] = mapped_column(Json)
    covered_until: Mapped[datetime] = mapped_column(UTCDateTime)
    built_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The faults in the rows below, all groups: the fleet's daily chart reads them here.
    faults: Mapped[int] = mapped_column(Integer)


class FleetRollup(Base):
    """The fleet figures of one cluster, day, pool and GPU model. A failed remediation keeps its
    node out of service until a human acts, so its GPU-hours grow with time: kept as the sums
    (GPUs, GPUs x start in epoch seconds) that give them at any later instant."""

    __tablename__ = "fleet_rollups"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)
    pool: Mapped[str] = mapped_column(Text, primary_key=True)
    gpu_model: Mapped[str] = mapped_column(Text, primary_key=True)
    faults: Mapped[int] = mapped_column(Integer)
    repaired: Mapped[int] = mapped_column(Integer)
    replaced: Mapped[int] = mapped_column(Integer)
    # Packed little-endian float64s: read as bytes, not parsed as JSON (a month is ~17,000 rows).
    repair_seconds: Mapped[bytes] = mapped_column(LargeBinary)
    lost_hours: Mapped[float] = mapped_column(Float)
    lost_open_gpus: Mapped[int] = mapped_column(Integer)
    lost_open_gpu_seconds: Mapped[float] = mapped_column(Float)
    disrupted_hours: Mapped[float] = mapped_column(Float)
    disrupted_open_gpus: Mapped[int] = mapped_column(Integer)
    disrupted_open_gpu_seconds: Mapped[float] = mapped_column(Float)


class LedgerMachine(Base):
    """A machine as hardware (issue #28): a cloud instance by its instance id, bare metal by its
    DMI serial; a node name is only where it is now (`cluster`, `node`: where it was last seen).
    A quarantined machine is never returned to a pool."""

    __tablename__ = "ledger_machines"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    provider_id: Mapped[str | None] = mapped_column(String(512))
    dmi_serial: Mapped[str | None] = mapped_column(String(128))
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    quarantined_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    quarantine_reason: Mapped[str | None] = mapped_column(Text)
    # The remediation whose strike quarantined it, and when an operator last lifted a hold
    # (strikes before it count no more).
    quarantined_by: Mapped[int | None] = mapped_column(BigInteger)
    hold_lifted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_ledger_machines_cluster_node", "cluster", "node"),)


class LedgerGpu(Base):
    """A GPU by its UUID, with the board serial and versions when something reported them."""

    __tablename__ = "ledger_gpus"

    uuid: Mapped[str] = mapped_column(String(128), primary_key=True)
    serial: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(128))
    vbios: Mapped[str | None] = mapped_column(String(64))
    driver: Mapped[str | None] = mapped_column(String(64))
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_ledger_gpus_model", "model"),)


class LedgerPlacement(Base):
    """Where a GPU sat from when to when (`to_at` None: it still sits there)."""

    __tablename__ = "ledger_placements"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    gpu_uuid: Mapped[str] = mapped_column(
        String(128), ForeignKey("ledger_gpus.uuid", ondelete="RESTRICT")
    )
    machine_id: Mapped[str | None] = mapped_column(
        String(256), ForeignKey("ledger_machines.id", ondelete="RESTRICT")
    )
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    pci_bus_id: Mapped[str | None] = mapped_column(String(32))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    from_at: Mapped[datetime] = mapped_column(UTCDateTime)
    to_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_ledger_placements_gpu", "gpu_uuid", "from_at"),
        Index("ix_ledger_placements_machine", "machine_id", "from_at"),
        Index("ix_ledger_placements_cluster_node", "cluster", "node", "from_at"),
    )


class LedgerLink(Base):
    """A signal, remediation or diagnostic verdict tied to the GPU and/or machine it concerns;
    `kind`/`code` repeat the signal's so that a GPU's faults by XID need no join."""

    __tablename__ = "ledger_links"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    subject: Mapped[str] = mapped_column(String(16))  # signal | remediation | verdict
    ref_id: Mapped[int | None] = mapped_column(BigInteger)  # the remediation's id, when one
    node: Mapped[str] = mapped_column(String(253))
    gpu_uuid: Mapped[str | None] = mapped_column(String(128))
    machine_id: Mapped[str | None] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(32))
    code: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[dict[str, Any]] = mapped_column(Json)
    at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_ledger_links_gpu", "gpu_uuid", "at"),
        Index("ix_ledger_links_machine", "machine_id", "at"),
        Index("ix_ledger_links_subject", "subject", "ref_id"),
        Index("ix_ledger_links_cluster_at", "cluster", "at"),
    )


class LedgerConflict(Base):
    """Bad input kept, not merged: a second UUID at a PCI address of a machine (a swapped card),
    recorded with both UUIDs for a human to look at."""

    __tablename__ = "ledger_conflicts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    node: Mapped[str] = mapped_column(String(253))
    machine_id: Mapped[str | None] = mapped_column(String(256))
    pci_bus_id: Mapped[str] = mapped_column(String(32))
    known_uuid: Mapped[str] = mapped_column(String(128))
    seen_uuid: Mapped[str] = mapped_column(String(128))
    at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_ledger_conflicts_cluster_at", "cluster", "at"),)


class RmaCaseRow(Base):
    """An RMA case (issue #28): the GPU or machine sent back, its forward-only status with each
    move kept in `history`, the evidence bundle as it was when the case opened, and the webhook's
    delivery state (retried with backoff until delivered: a case is never lost)."""

    __tablename__ = "rma_cases"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    target: Mapped[str] = mapped_column(String(16))
    hardware_id: Mapped[str] = mapped_column(String(256))
    node: Mapped[str] = mapped_column(String(253))
    gpu_index: Mapped[int | None] = mapped_column(Integer)
    remediation_id: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    history: Mapped[list[dict[str, Any]]] = mapped_column(Json)
    bundle: Mapped[dict[str, Any]] = mapped_column(Json)
    webhook_state: Mapped[str] = mapped_column(String(16))
    webhook_attempts: Mapped[int] = mapped_column(Integer, default=0)
    webhook_next_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    webhook_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_rma_cases_cluster_status", "cluster", "status", "opened_at"),
        Index("ix_rma_cases_hardware", "hardware_id", "status"),
        Index("ix_rma_cases_webhook", "webhook_state", "webhook_next_at"),
    )
