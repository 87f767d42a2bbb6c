"""One page of remediations for the list, the node page and the API, with the cursor checked
at the edge: a cursor the store cannot use is the client's mistake (400), never a 500."""

from __future__ import annotations

from datetime import UTC

from remediator.store import cursor as cursors
from remediator.store.records import Page, RemediationFilter
from remediator.web.deps import WebDeps
from remediator.web.problems import WebError

MAX_ID = 2**63 - 1


def fetch_page(deps: WebDeps, filters: RemediationFilter, cursor: str | None, limit: int) -> Page:
    """One page of the list; a cursor the store cannot use (tampered, from another ordering,
    ids beyond BIGINT) is the client's mistake: 400, never 500."""
    cursor = cursor or None  # `cursor=` (empty) is the first page, as no cursor is
    try:
        if cursor is not None:
            position = cursors.decode(cursor)
            if position.id is not None and not 0 <= position.id <= MAX_ID:
                raise cursors.InvalidCursor("position out of range")
            if position.created_at is not None:
                position.created_at.astimezone(UTC)  # year 1 at +14:00 has no UTC time
        return deps.repository.list(filters, cursor, limit)
    except (cursors.InvalidCursor, OverflowError) as exc:
        raise WebError(400, f"invalid cursor: {exc}") from exc
