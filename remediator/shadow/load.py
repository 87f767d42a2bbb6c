"""The recorded history a shadow report is built from, read from the store."""

from __future__ import annotations

from datetime import datetime

from remediator.shadow.report import FIRST_FAULT_LOOKBACK, ShadowReport, build_report
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import MAX_PAGE, Repository


def load_records(
    repository: Repository, since: datetime, until: datetime
) -> list[RemediationRecord]:
    """Remediations opened in [since minus a week, until), with their timelines: the week before
    tells a first fault from a repeat."""
    wanted = RemediationFilter(created_from=since - FIRST_FAULT_LOOKBACK, created_to=until)
    found: list[RemediationRecord] = []
    cursor: str | None = None
    while True:
        page = repository.list(wanted, cursor, limit=MAX_PAGE)
        found.extend(repository.with_events(page.rows))
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


def shadow_report(repository: Repository, since: datetime, until: datetime) -> ShadowReport:
    status = repository.controller_status()
    trips = (
        [(status.breaker_tripped_at, status.breaker_reason or "")]
        if status.breaker_tripped_at is not None
        else []
    )
    return build_report(load_records(repository, since, until), since, until, trips)
