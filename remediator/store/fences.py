"""The fence book: this store's identity and the operators' fence decisions of one cluster, each
audited in the same transaction as the decision it records.

A decision that fails its checks raises before anything is written (the API's 4xx)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.store.db import session_scope
from remediator.store.models import AuditEntry, FenceDecision, StoreIdentity
from remediator.store.optouts import Asker

MAX_DECISIONS = 5_000


class FenceAction(StrEnum):
    # An operator fences a node (kept fenced until an operator releases it).
    FENCE = "fence"
    # An operator lifts a fence: an operator's own, a failed validation's, or a foreign one.
    RELEASE = "release"
    # An operator takes a foreign fence over: it stays, as this store's, until released.
    ADOPT = "adopt"


@dataclass(frozen=True)
class Decision:
    id: int
    node: str
    action: FenceAction
    reason: str
    actor: str
    at: datetime
    mark: Mapping[str, str]


class FenceBook:
    def __init__(
        self, session_factory: sessionmaker[Session], cluster: str, clock: Clock | None = None
    ) -> None:
        self._factory = session_factory
        self._cluster = cluster
        self._clock: Clock = clock or SystemClock()
        self._store_id: str | None = None

    def store_id(self) -> str:
        """Written by the schema's migration; read once, it never changes."""
        if self._store_id is None:
            with session_scope(self._factory) as session:
                row = session.get(StoreIdentity, 1)
            if row is None:
                raise LookupError("this database has no store identity: run db upgrade")
            self._store_id = row.store_id
        return self._store_id

    def decisions(self) -> list[Decision]:
        """Every decision of this cluster, oldest first (the newest per node is what stands)."""
        with session_scope(self._factory) as session:
            rows = session.scalars(
                select(FenceDecision)
                .where(FenceDecision.cluster == self._cluster)
                .order_by(FenceDecision.id.desc())
                .limit(MAX_DECISIONS)
            ).all()
        return [_decision(r) for r in reversed(rows)]

    def record(
        self,
        node: str,
        action: FenceAction,
        *,
        reason: str,
        asker: Asker,
        mark: Mapping[str, str] | None = None,
    ) -> Decision:
        now = self._clock.now()
        with session_scope(self._factory, write=True) as session:
            row = FenceDecision(
                cluster=self._cluster,
                node=node,
                action=action.value,
                reason=reason,
                actor=asker.actor,
                at=now,
                mark=json.dumps(dict(mark), sort_keys=True) if mark else None,
            )
            session.add(row)
            session.add(
                AuditEntry(
                    cluster=self._cluster,
                    at=now,
                    actor=asker.actor,
                    token_id=asker.token_id,
                    source=asker.source,
                    command=f"fence_{action.value}",
                    remediation_id=None,
                    reason=reason,
                    outcome="done",
                    detail=f"node {node}",
                )
            )
            session.flush()
            return _decision(row)


def _decision(row: FenceDecision) -> Decision:
    mark = json.loads(row.mark) if row.mark else {}
    return Decision(
        id=row.id,
        node=row.node,
        action=FenceAction(row.action),
        reason=row.reason,
        actor=row.actor,
        at=row.at,
        mark={str(k): str(v) for k, v in mark.items()},
    )
