"""The doctor's look at fences: nodes fenced by another history (marks this database did not
write: a restored backup, another database_url, a blue/green deploy). The controller never lifts
them by itself; the doctor says how many and where, so that someone adopts or releases each."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from remediator.doctor.context import DoctorContext
from remediator.doctor.report import Finding, Status
from remediator.doctor.systems import read_only_engine
from remediator.errors import RemediatorError
from remediator.fences.derive import remediation_nodes
from remediator.fences.marks import FenceIdentity, Known, Owner, owner_of, read_mark
from remediator.ledger.store import Ledger
from remediator.store.db import make_session_factory
from remediator.store.fences import FenceBook
from remediator.store.repository import Repository

AREA = "fences"
SHOWN = 10


def fences(ctx: DoctorContext) -> list[Finding]:
    try:
        nodes = ctx.nodes.get()
        uid = ctx.kube.get().namespace_uid("kube-system")
    except RemediatorError as exc:
        return [Finding(AREA, "foreign", Status.SKIP, str(exc), "see the kubernetes check")]
    marked = [n for n in nodes if read_mark(n).present]
    if not marked:
        return [Finding(AREA, "foreign", Status.PASS, "no node carries a fence of remediator's")]
    try:
        engine = read_only_engine(ctx.settings.database_url, ctx.timeout)
    except RemediatorError as exc:
        return [Finding(AREA, "foreign", Status.SKIP, str(exc), "see the database check")]
    try:
        factory = make_session_factory(engine)
        cluster = ctx.settings.cluster_name
        repo = Repository(factory, cluster)
        book = FenceBook(factory, cluster)
        decisions = {str(d.id): d.node for d in book.decisions()}
        held, _ = Ledger(factory, cluster).quarantine_state()

        def remediation(remediation_id: int) -> frozenset[str] | None:
            record = repo.get(remediation_id)
            return remediation_nodes(record) if record is not None else None

        known = Known(
            remediation, lambda did, node: decisions.get(did) == node, lambda m: m in held
        )
        me = FenceIdentity(book.store_id(), uid)
        foreign = [
            (n.name, why)
            for n in marked
            for owner, why in [owner_of(read_mark(n), n.name, me, known)]
            if owner is Owner.FOREIGN
        ]
    except (SQLAlchemyError, LookupError) as exc:
        return [Finding(AREA, "foreign", Status.SKIP, f"cannot read the store: {exc}", "")]
    finally:
        engine.dispose()
    if not foreign:
        return [
            Finding(AREA, "foreign", Status.PASS, f"{len(marked)} fenced node(s), all this store's")
        ]
    listed = "; ".join(f"{name}: {why}" for name, why in foreign[:SHOWN])
    more = f" (+{len(foreign) - SHOWN} more)" if len(foreign) > SHOWN else ""
    return [
        Finding(
            AREA,
            "foreign",
            Status.WARN,
            f"{len(foreign)} node(s) fenced by another history, never lifted by remediator "
            f"itself: {listed}{more}",
            'adopt or release each with a reason: POST /api/v1/fences/NODE {"action": '
            '"adopt"|"release", "reason": "…"} (docs/safety.md)',
        )
    ]
