"""Cluster identities in a shared database: a cluster is its name plus the UID of its
`kube-system` namespace, recorded by the first controller that starts under the name. A second
cluster configured with a taken name is refused before it writes anything, so two clusters
both called "prod" never mix their histories.

Also the fleet's list of clusters: every name that has an identity or any remediation, so a
database from before identities (upgraded in place) still shows its cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from remediator.clock import Clock, SystemClock
from remediator.errors import RemediatorError
from remediator.model.cluster import name_problem
from remediator.store.db import session_scope
from remediator.store.models import ClusterIdentity, ControllerState, Remediation


class IdentityConflict(RemediatorError):
    """This cluster's name (or its kube-system UID) is already another identity's."""


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    kube_system_uid: str
    registered_at: datetime
    registered_by: str


def _record(row: ClusterIdentity) -> ClusterRecord:
    return ClusterRecord(row.name, row.kube_system_uid, row.registered_at, row.registered_by)


class ClusterRegistry:
    def __init__(self, session_factory: sessionmaker[Session], clock: Clock | None = None) -> None:
        self._factory = session_factory
        self._clock: Clock = clock or SystemClock()

    def claim(self, name: str, kube_system_uid: str, *, by: str) -> ClusterRecord:
        """Record `name` as this cluster's, or confirm it already is; raises IdentityConflict
        when the name, or this UID, belongs to another identity. Racing first starts agree:
        the insert does nothing on a conflict and the row read back decides."""
        problem = name_problem(name)
        if problem is not None:
            raise RemediatorError(problem)
        with session_scope(self._factory, write=True) as session:
            insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
            session.execute(
                insert(ClusterIdentity)
                .values(
                    name=name,
                    kube_system_uid=kube_system_uid,
                    registered_at=self._clock.now(),
                    registered_by=by[:256],
                )
                .on_conflict_do_nothing()
            )
            row = session.get(ClusterIdentity, name, populate_existing=True)
            if row is None:
                taken = ClusterIdentity.kube_system_uid == kube_system_uid
                other = session.scalars(select(ClusterIdentity).where(taken)).first()
                where = other.name if other else "another name"
                raise IdentityConflict(
                    f"this cluster (kube-system UID {kube_system_uid}) is already registered as "
                    f"{where!r} in this database; set cluster_name: {where} or use another "
                    "database"
                )
            if row.kube_system_uid != kube_system_uid:
                raise IdentityConflict(
                    f"cluster name {name!r} belongs to another cluster in this database "
                    f"(kube-system UID {row.kube_system_uid}, registered "
                    f"{row.registered_at:%Y-%m-%d} by {row.registered_by}); this cluster's "
                    f"kube-system UID is {kube_system_uid}: give it its own cluster_name"
                )
            return _record(row)

    def get(self, name: str) -> ClusterRecord | None:
        with session_scope(self._factory) as session:
            row = session.get(ClusterIdentity, name)
            return _record(row) if row else None

    def registered(self) -> tuple[str, ...]:
        with session_scope(self._factory) as session:
            return tuple(sorted(session.scalars(select(ClusterIdentity.name))))

    def names(self) -> tuple[str, ...]:
        """Every cluster the database knows: registered, or with a controller or history."""
        with session_scope(self._factory) as session:
            found = set(session.scalars(select(ClusterIdentity.name)))
            found.update(session.scalars(select(ControllerState.cluster)))
            if not found:
                found.update(session.scalars(select(Remediation.cluster).distinct()))
            return tuple(sorted(found))
