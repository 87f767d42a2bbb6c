"""The one error type the console's handlers turn into JSON (under /api) or a page, and how
the API documents those answers."""

from __future__ import annotations

from typing import Any

from remediator.web.schemas import ErrorOut


class WebError(Exception):
    """An answer other than success, with the reason the client is shown."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": text}
    for code, text in (
        (400, "bad cursor, or a body that cannot be read"),
        (401, "no or unknown token"),
        (403, "token lacks the role"),
        (404, "not found"),
        (409, "state does not allow it"),
        (422, "malformed request"),
    )
}
