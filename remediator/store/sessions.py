"""Server-side console sessions: the browser's cookie is a random id, the table keeps only its
SHA-256, so neither the cookie nor the database ever holds a bearer token; logging out (or the
expiry) ends the session for good."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, update
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.store.db import session_scope
from remediator.store.models import WebSession


@dataclass(frozen=True)
class SessionRecord:
    token_id: str
    role: str
    name: str | None
    expires_at: datetime


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self._factory = session_factory
        self._cluster = cluster
        self._clock: Clock = clock or SystemClock()

    def open(self, *, token_id: str, role: str, name: str | None, lifetime: timedelta) -> str:
        """A new session; returns the id for the cookie (shown nowhere else)."""
        session_id = secrets.token_urlsafe(32)
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            # Expired sessions go on the way: logins are rare, so this keeps the table small.
            session.execute(delete(WebSession).where(WebSession.expires_at < now))
            session.add(
                WebSession(
                    id_hash=_hash(session_id),
                    cluster=self._cluster,
                    token_id=token_id,
                    role=role,
                    name=name,
                    created_at=now,
                    expires_at=now + lifetime,
                )
            )
        return session_id

    def find(self, session_id: str) -> SessionRecord | None:
        """The live session with this id; None when unknown, revoked or expired."""
        if not session_id or len(session_id) > 128:
            return None
        with session_scope(self._factory) as session:
            row = session.get(WebSession, _hash(session_id))
            if (
                row is None
                or row.cluster != self._cluster
                or row.revoked_at is not None
                or row.expires_at <= self._clock.now()
            ):
                return None
            return SessionRecord(row.token_id, row.role, row.name, row.expires_at)

    def revoke(self, session_id: str) -> None:
        with session_scope(self._factory, write=True) as session:
            session.execute(
                update(WebSession)
                .where(WebSession.id_hash == _hash(session_id), WebSession.revoked_at.is_(None))
                .values(revoked_at=self._clock.now())
            )
