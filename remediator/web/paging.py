"""One page of remediations for the list, the node page and the API, with the cursor checked
at the edge: a cursor the store cannot use is the client's mistake (400), never a 500."""

from __future__ import annotations

from remediator.store import cursor as cursors
from remediator.store.records import Page, RemediationFilter
from remediator.web.deps import WebDeps
from remediator.web.problems import WebError

MAX_ID = 2**63 - 1


def fetch_page(deps: WebDeps, filters: RemediationFilter, cursor: str | None, limit: int) -> Page:
    """One page of the list. The API's pattern refuses a text that is not a cursor (422); the
    pages read theirs from the URL unchecked, so here it is the client's mistake: 400."""
    cursor = cursor or None  # `cursor=` (empty) is the first page, as no cursor is
    try:
        return deps.repository.list(filters, cursor, limit)
    except cursors.InvalidCursor as exc:
        raise WebError(400, f"invalid cursor: {exc}") from exc
