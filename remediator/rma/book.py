"""The RMA book: cases of one cluster, their moves and notes (each audited in the same
transaction) and their webhook delivery bookkeeping, one history line at a time. Reads may span
clusters (the fleet console): a list names the clusters it may show."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.errors import NotFoundError
from remediator.rma.model import (
    DELIVERED_AT,
    NOTE,
    RmaCase,
    RmaStatus,
    Target,
    check_move,
    is_repeat,
)
from remediator.store.db import session_scope
from remediator.store.models import AuditEntry, RmaCaseRow

MAX_LISTED = 500
AUDIT_COMMAND = "rma_update"
NO_WEBHOOK = "none"
PENDING = "pending"
DELIVERED = "delivered"


@dataclass(frozen=True)
class NewCase:
    target: Target
    hardware_id: str
    node: str
    gpu_index: int | None
    remediation_id: int | None
    reason: str


@dataclass(frozen=True)
class Asker:
    """Who moves a case, as the audit log records it (the token's fingerprint, never the
    token)."""

    actor: str
    source: str
    token_id: str = ""


class RmaBook:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self._factory = session_factory
        self._cluster = cluster
        self._clock: Clock = clock or SystemClock()

    @property
    def clock(self) -> Clock:
        return self._clock

    def open_case_of(self, hardware_id: str) -> RmaCase | None:
        """The case of this hardware that is not closed yet, if any (one at a time)."""
        with session_scope(self._factory) as session:
            row = session.scalars(
                select(RmaCaseRow)
                .where(
                    RmaCaseRow.hardware_id == hardware_id,
                    RmaCaseRow.status != RmaStatus.CLOSED.value,
                )
                .order_by(RmaCaseRow.id)
                .limit(1)
            ).first()
            return None if row is None else _case(row)

    def open(
        self, new: NewCase, bundle: Mapping[str, Any], *, webhook: bool, actor: str
    ) -> tuple[RmaCase, bool]:
        """Open a case; (the case, True), or (the hardware's case not closed yet, False): a GPU
        is sent back once, however many remediations find it at fault."""
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            existing = session.scalars(
                select(RmaCaseRow)
                .where(
                    RmaCaseRow.hardware_id == new.hardware_id,
                    RmaCaseRow.status != RmaStatus.CLOSED.value,
                )
                .order_by(RmaCaseRow.id)
                .limit(1)
                .with_for_update()
            ).first()
            if existing is not None:
                return _case(existing), False
            row = RmaCaseRow(
                cluster=self._cluster,
                target=new.target.value,
                hardware_id=new.hardware_id[:256],
                node=new.node,
                gpu_index=new.gpu_index,
                remediation_id=new.remediation_id,
                status=RmaStatus.OPENED.value,
                reason=new.reason,
                opened_at=now,
                updated_at=now,
                history=[{"at": now.isoformat(), "status": "opened", "by": actor}],
                bundle=dict(bundle),
                webhook_state=PENDING if webhook else NO_WEBHOOK,
                webhook_attempts=0,
                webhook_next_at=now if webhook else None,
            )
            session.add(row)
            session.flush()
            # The bundle names its case: known only once the row has its id.
            row.bundle = {**row.bundle, "case": {**row.bundle.get("case", {}), "id": row.id}}
            session.flush()
            return _case(row), True

    def get(self, case_id: int) -> RmaCase:
        with session_scope(self._factory) as session:
            row = session.get(RmaCaseRow, case_id)
            if row is None:
                raise NotFoundError(f"no RMA case {case_id}")
            return _case(row)

    def list(
        self,
        *,
        status: RmaStatus | None = None,
        clusters: Collection[str] | None = None,
        limit: int = MAX_LISTED,
    ) -> tuple[RmaCase, ...]:
        """Newest first; `clusters` None lists every cluster's (the caller checked it may)."""
        statement = select(RmaCaseRow)
        if status is not None:
            statement = statement.where(RmaCaseRow.status == status.value)
        if clusters is not None:
            statement = statement.where(RmaCaseRow.cluster.in_(sorted(clusters)))
        statement = statement.order_by(RmaCaseRow.id.desc()).limit(max(1, min(limit, MAX_LISTED)))
        with session_scope(self._factory) as session:
            return tuple(_case(r) for r in session.scalars(statement))

    def move(
        self, case_id: int, status: RmaStatus | None, *, asker: Asker, note: str | None
    ) -> tuple[RmaCase, bool]:
        """Move a case forward and/or note something on it (MoveRefused going back, nothing
        written but the audit entry of the refusal, by the caller). A status it has already
        with no new note is (the case, False) and changes nothing; a note with no move is a
        history line of its own. The line and its audit entry are one transaction; each line
        is a webhook event of its own (`RmaWebhook.deliver_due`)."""
        if status is None and not note:
            raise ValueError("a move needs a status or a note")
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            row = session.get(RmaCaseRow, case_id, with_for_update=True)
            if row is None:
                raise NotFoundError(f"no RMA case {case_id}")
            before = row.status
            moved = status is not None and check_move(RmaStatus(before), status)
            if not moved and (not note or is_repeat(row.history or [], note)):
                return _case(row), False
            line: dict[str, Any] = {"at": now.isoformat(), "status": before, "by": asker.actor}
            if moved:
                assert status is not None
                row.status = line["status"] = status.value
                detail = f"case {row.id}: {before} → {status.value}"
            else:
                line["event"] = NOTE
                detail = f"case {row.id}: note"
            if note:
                line["note"] = note
            row.updated_at = now
            row.history = [*(row.history or []), line]
            if row.webhook_state not in (NO_WEBHOOK, PENDING):
                # A case still pending keeps its schedule: its earlier events go first.
                row.webhook_state = PENDING
                row.webhook_attempts = 0
                row.webhook_next_at = now
            session.add(
                AuditEntry(
                    cluster=row.cluster,
                    at=now,
                    actor=asker.actor[:256],
                    token_id=asker.token_id[:16],
                    source=asker.source[:64],
                    command=AUDIT_COMMAND,
                    remediation_id=row.remediation_id,
                    reason=note,
                    outcome="done",
                    detail=detail,
                )
            )
            session.flush()
            return _case(row), True

    def due(self, now: datetime, limit: int = 50) -> tuple[RmaCase, ...]:
        """This cluster's cases whose webhook delivery is due."""
        statement = (
            select(RmaCaseRow)
            .where(
                RmaCaseRow.cluster == self._cluster,
                RmaCaseRow.webhook_state == PENDING,
                RmaCaseRow.webhook_next_at <= now,
            )
            .order_by(RmaCaseRow.webhook_next_at, RmaCaseRow.id)
            .limit(limit)
        )
        with session_scope(self._factory) as session:
            return tuple(_case(r) for r in session.scalars(statement))

    def delivered(self, case: RmaCase, index: int | None) -> RmaCase:
        """The ticket system took history line `index`: marked so, and the case delivered
        once no line is left to tell (None: none was)."""
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            row = _row(session, case.id)
            history = [dict(line) for line in row.history or []]
            if index is not None and index < len(history):
                history[index][DELIVERED_AT] = now.isoformat()
                row.history = history
            if all(DELIVERED_AT in line for line in history):
                row.webhook_state = DELIVERED
                row.webhook_next_at = None
                row.delivered_at = now
            else:
                row.webhook_next_at = now
            row.webhook_error = None
            row.webhook_attempts = 0
            session.flush()
            return _case(row)

    def failed(self, case: RmaCase, error: str, retry_in: timedelta) -> RmaCase:
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            row = _row(session, case.id)
            row.webhook_attempts = case.webhook_attempts + 1
            row.webhook_error = error[:1000]
            row.webhook_next_at = now + retry_in
            session.flush()
            return _case(row)


def _row(session: Session, case_id: int) -> RmaCaseRow:
    row = session.get(RmaCaseRow, case_id, with_for_update=True)
    if row is None:
        raise NotFoundError(f"no RMA case {case_id}")
    return row


def _case(row: RmaCaseRow) -> RmaCase:
    return RmaCase(
        id=row.id,
        cluster=row.cluster,
        target=Target(row.target),
        hardware_id=row.hardware_id,
        node=row.node,
        gpu_index=row.gpu_index,
        remediation_id=row.remediation_id,
        status=RmaStatus(row.status),
        reason=row.reason,
        opened_at=row.opened_at,
        updated_at=row.updated_at,
        history=tuple(row.history or ()),
        bundle=dict(row.bundle or {}),
        webhook_state=row.webhook_state,
        webhook_attempts=row.webhook_attempts,
        webhook_next_at=row.webhook_next_at,
        webhook_error=row.webhook_error,
        delivered_at=row.delivered_at,
    )
