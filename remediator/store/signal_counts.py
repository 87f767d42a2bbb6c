"""Rewrites the disposition of stored signal rows the intake counted repeats onto
(signals/repeats.py). A row is found by what it stores of its signal: a row the intake wrote
(no remediation of its own) of that cluster, node, time, kind, code, GPU and source; the store
writes one such row per key per fold window, so that names one row."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, update
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from remediator.signals.model import Signal
from remediator.signals.repeats import MAX_TEXT
from remediator.store.db import session_scope
from remediator.store.models import ObservedSignal


def recount(
    factory: sessionmaker[Session], cluster: str, rows: Sequence[tuple[Signal, str | None]]
) -> None:
    """One transaction for the whole intake's rows."""
    if not rows:
        return
    with session_scope(factory, write=True) as session:
        for signal, text in rows:
            session.execute(
                update(ObservedSignal)
                .where(
                    ObservedSignal.cluster == cluster,
                    ObservedSignal.node == signal.node,
                    ObservedSignal.observed_at == signal.observed_at,
                    ObservedSignal.kind == signal.kind.value,
                    _same(ObservedSignal.code, signal.code),
                    _same(ObservedSignal.gpu, signal.gpu),
                    ObservedSignal.source == signal.source,
                    ObservedSignal.remediation_id.is_(None),
                )
                .values(disposition=text[:MAX_TEXT] if text else None)
            )


def _same(column: InstrumentedAttribute[int | None], value: int | None) -> ColumnElement[bool]:
    return column.is_(None) if value is None else column == value
