"""The audit log: one append-only row per human command (approve, release, retry, cancel,
pause, resume, reset breaker, policy override), written whether it was done or refused.

The remediation timeline says what happened to a remediation; this says who asked for what,
from where and why, including what was refused and the controller switches that have no
timeline of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.store.db import session_scope
from remediator.store.models import AuditEntry

MAX_AUDIT_PAGE = 500


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: datetime
    actor: str
    token_id: str
    source: str
    command: str
    remediation_id: int | None
    reason: str | None
    outcome: str  # "done" | "refused" | "not_found"
    detail: str | None


@dataclass(frozen=True)
class NewAudit:
    actor: str
    token_id: str
    source: str
    command: str
    outcome: str
    remediation_id: int | None = None
    reason: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class AuditQuery:
    """Newest first; `before` is the id of the last row of the previous page."""

    commands: tuple[str, ...] = ()
    remediation_id: int | None = None
    before: int | None = None
    limit: int = 100


class AuditLog:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self._factory = session_factory
        self._cluster = cluster
        self._clock: Clock = clock or SystemClock()

    def append(self, entry: NewAudit) -> AuditRecord:
        row = AuditEntry(
            cluster=self._cluster,
            at=self._clock.now(),
            actor=entry.actor[:256],
            token_id=entry.token_id[:16],
            source=entry.source[:64],
            command=entry.command[:32],
            remediation_id=entry.remediation_id,
            reason=entry.reason,
            outcome=entry.outcome,
            detail=entry.detail,
        )
        with session_scope(self._factory, write=True) as session:
            session.add(row)
            session.flush()
            return _record(row)

    def list(self, query: AuditQuery) -> tuple[AuditRecord, ...]:
        statement = select(AuditEntry).where(AuditEntry.cluster == self._cluster)
        if query.commands:
            statement = statement.where(AuditEntry.command.in_(query.commands))
        if query.remediation_id is not None:
            statement = statement.where(AuditEntry.remediation_id == query.remediation_id)
        if query.before is not None:
            statement = statement.where(AuditEntry.id < query.before)
        limit = max(1, min(query.limit, MAX_AUDIT_PAGE))
        statement = statement.order_by(AuditEntry.id.desc()).limit(limit)
        with session_scope(self._factory) as session:
            return tuple(_record(r) for r in session.scalars(statement))


def _record(row: AuditEntry) -> AuditRecord:
    return AuditRecord(
        id=row.id,
        at=row.at,
        actor=row.actor,
        token_id=row.token_id,
        source=row.source,
        command=row.command,
        remediation_id=row.remediation_id,
        reason=row.reason,
        outcome=row.outcome,
        detail=row.detail,
    )
