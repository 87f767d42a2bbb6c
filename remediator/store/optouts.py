"""The opt-out book: recorded opt-outs of one cluster and their audit entries, written in the
same transaction as the change they record (add, remove, the expiry noticed, the escalation).

A request that fails its checks (model/optout.py) raises before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.errors import NotFoundError
from remediator.model.optout import (
    OptOutRecord,
    OptOutRefused,
    Scope,
    Target,
    check_request,
    span,
)
from remediator.store.db import session_scope
from remediator.store.models import AuditEntry, OptOut

MAX_LISTED = 500


@dataclass(frozen=True)
class Asker:
    """Who asks, as the audit log records it (the token's fingerprint, never the token)."""

    actor: str
    source: str
    token_id: str = ""


class OptOutBook:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self._factory = session_factory
        self._cluster = cluster
        self._clock: Clock = clock or SystemClock()

    @property
    def clock(self) -> Clock:
        return self._clock

    def add(
        self,
        target: Target,
        *,
        lasting: timedelta,
        reason: str | None,
        asker: Asker,
        longest: timedelta,
    ) -> OptOutRecord:
        """Record an opt-out from now for `lasting`; OptOutRefused (nothing written) when the
        request is bad."""
        now = self._clock.now()
        until = now + lasting
        text = check_request(reason, now, until, longest)
        if not asker.actor.strip():
            raise OptOutRefused("who asks is required (an actor name)")
        row = OptOut(
            cluster=self._cluster,
            scope=target.scope.value,
            target=target.name,
            actor=asker.actor[:256],
            reason=text,
            created_at=now,
            until=until,
        )
        with session_scope(self._factory, write=True) as session:
            session.add(row)
            session.flush()
            record = _record(row)
            detail = f"{target} until {until.isoformat(timespec='seconds')} ({span(until - now)})"
            self._audit(session, asker, "optout-add", text, f"#{record.id}: {detail}")
            return record

    def remove(self, opt_out_id: int, *, asker: Asker, reason: str | None) -> OptOutRecord:
        """End an opt-out now; NotFoundError for an unknown id, OptOutRefused when it already
        ended (removed before)."""
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            row = session.get(OptOut, opt_out_id, with_for_update=True)
            if row is None or row.cluster != self._cluster:
                raise NotFoundError(f"opt-out #{opt_out_id} not found")
            if row.removed_at is not None:
                raise OptOutRefused(
                    f"opt-out #{opt_out_id} was removed already by {row.removed_by}"
                )
            row.removed_at = now
            row.removed_by = asker.actor[:256]
            record = _record(row)
            why = (reason or "").strip()[:500] or None
            self._audit(
                session, asker, "optout-remove", why, f"#{record.id}: {_target(record)} ended"
            )
            return record

    def get(self, opt_out_id: int) -> OptOutRecord | None:
        with session_scope(self._factory) as session:
            row = session.get(OptOut, opt_out_id)
            return _record(row) if row is not None and row.cluster == self._cluster else None

    def list(self, *, ended: bool = False, limit: int = MAX_LISTED) -> tuple[OptOutRecord, ...]:
        """Newest first: those not removed and not expired (with `ended`: all of them)."""
        statement = select(OptOut).where(OptOut.cluster == self._cluster)
        if not ended:
            statement = statement.where(
                OptOut.removed_at.is_(None), OptOut.until > self._clock.now()
            )
        statement = statement.order_by(OptOut.id.desc()).limit(max(1, min(limit, MAX_LISTED)))
        with session_scope(self._factory) as session:
            return tuple(_record(r) for r in session.scalars(statement))

    def concerning(
        self, node: str | None, pods: Iterable[str] = (), jobs: Iterable[str] = ()
    ) -> tuple[OptOutRecord, ...]:
        """The records not removed on this node (when given), on any of these pods or Slurm
        jobs (active or expired: model.optout.holding tells them apart)."""
        keys = [(Scope.NODE.value, node)] if node else []
        keys += [(Scope.POD.value, p) for p in pods]
        keys += [(Scope.SLURM_JOB.value, j) for j in jobs]
        targets = {t for _, t in keys}
        statement = select(OptOut).where(
            OptOut.cluster == self._cluster,
            OptOut.removed_at.is_(None),
            OptOut.target.in_(sorted(targets)),
        )
        wanted = set(keys)
        if not wanted:
            return ()
        with session_scope(self._factory) as session:
            return tuple(
                _record(r) for r in session.scalars(statement) if (r.scope, r.target) in wanted
            )

    def expired_unnoted(self) -> tuple[OptOutRecord, ...]:
        """Expired, not removed, and not audited as expired yet."""
        statement = select(OptOut).where(
            OptOut.cluster == self._cluster,
            OptOut.removed_at.is_(None),
            OptOut.expired_noted_at.is_(None),
            OptOut.until <= self._clock.now(),
        )
        with session_scope(self._factory) as session:
            return tuple(_record(r) for r in session.scalars(statement.limit(MAX_LISTED)))

    def note_expired(self, records: Iterable[OptOutRecord], actor: str) -> tuple[OptOutRecord, ...]:
        """Stamp and audit each expiry once (a second caller finds it stamped and writes
        nothing); returns the ones this call noted."""
        noted = []
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            for record in records:
                changed = session.execute(
                    update(OptOut)
                    .where(OptOut.id == record.id, OptOut.expired_noted_at.is_(None))
                    .values(expired_noted_at=now)
                )
                if getattr(changed, "rowcount", 0) != 1:
                    continue
                noted.append(record)
                detail = (
                    f"#{record.id}: {_target(record)} expired at "
                    f"{record.until.isoformat(timespec='seconds')}: it protects nothing now"
                )
                self._audit(session, Asker(actor, "controller"), "optout-expire", None, detail)
        return tuple(noted)

    def audit_escalation(self, remediation_id: int, actor: str, reason: str, detail: str) -> None:
        with session_scope(self._factory, write=True) as session:
            self._audit(
                session,
                Asker(actor, "controller"),
                "optout-escalate",
                reason,
                detail,
                remediation_id,
            )

    def _audit(
        self,
        session: Session,
        asker: Asker,
        command: str,
        reason: str | None,
        detail: str,
        remediation_id: int | None = None,
    ) -> None:
        session.add(
            AuditEntry(
                cluster=self._cluster,
                at=self._clock.now(),
                actor=asker.actor[:256],
                token_id=asker.token_id[:16],
                source=asker.source[:64],
                command=command,
                remediation_id=remediation_id,
                reason=reason,
                outcome="done",
                detail=detail,
            )
        )


def _target(record: OptOutRecord) -> str:
    return str(Target(record.scope, record.target))


def _record(row: OptOut) -> OptOutRecord:
    return OptOutRecord(
        id=row.id,
        cluster=row.cluster,
        scope=Scope(row.scope),
        target=row.target,
        actor=row.actor,
        reason=row.reason,
        since=row.created_at,
        until=row.until,
        removed_at=row.removed_at,
        removed_by=row.removed_by,
        expired_noted_at=row.expired_noted_at,
    )
