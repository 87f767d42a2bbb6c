"""The one error type the console's handlers turn into JSON (under /api) or a page."""

from __future__ import annotations


class WebError(Exception):
    """An answer other than success, with the reason the client is shown."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
