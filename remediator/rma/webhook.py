"""The RMA webhook: each event of a case (its opening, each move, each note) posted as JSON to the
ticket system in order, one post each, with the evidence bundle. Delivery is durable: the case's
history lines say which are still to tell; a refusal or an unreachable endpoint is retried with
exponential backoff, each failure a line on the remediation's timeline, until it is taken.
Nothing is dropped after N tries: an RMA that never reached the vendor is a GPU that never comes
back."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx

from remediator.rma.book import RmaBook
from remediator.rma.model import DELIVERED_AT, RmaCase, event_name
from remediator.settings import RmaSettings

log = logging.getLogger(__name__)

# (case, error) → a line on the case's remediation timeline.
FailureNote = Callable[[RmaCase, str, timedelta], None]


def payload(case: RmaCase, index: int, link: str | None = None) -> dict[str, Any]:
    """History line `index` as its own event: the change it made, and the case as it stood
    right after it (its status and history up to that line), so a ticket system that applies
    the events in order ends where the case is. `event_id` is the same on a resend."""
    history = [
        {k: v for k, v in line.items() if k != DELIVERED_AT} for line in case.history[: index + 1]
    ]
    line = history[index]
    return {
        "event": event_name(history, index),
        "event_id": f"rma-{case.id}-{index}",
        "sequence": index,
        "change": {
            "at": line["at"],
            "by": line.get("by"),
            "from": history[index - 1]["status"] if index > 0 else None,
            "status": line["status"],
            "note": line.get("note"),
        },
        "case": {
            "id": case.id,
            "cluster": case.cluster,
            "target": case.target.value,
            "hardware_id": case.hardware_id,
            "node": case.node,
            "gpu_index": case.gpu_index,
            "remediation_id": case.remediation_id,
            "status": line["status"],
            "reason": case.reason,
            "opened_at": case.opened_at.isoformat(),
            "updated_at": line["at"],
            "history": history,
            "link": link,
        },
        "bundle": case.bundle,
    }


def backoff(attempts: int, settings: RmaSettings) -> timedelta:
    """After the n-th failed attempt: base·2^(n-1), capped."""
    seconds = settings.retry_base_seconds * 2 ** min(max(attempts - 1, 0), 20)
    return timedelta(seconds=min(settings.retry_max_seconds, seconds))


class RmaWebhook:
    def __init__(
        self,
        settings: RmaSettings,
        transport: httpx.BaseTransport | None = None,
        console_url: str | None = None,
    ) -> None:
        if not settings.webhook_url:
            raise ValueError("no rma.webhook_url configured")
        self._settings = settings
        self._url = settings.webhook_url
        self._console = console_url.rstrip("/") if console_url else None
        self._http = httpx.Client(timeout=settings.timeout_seconds, transport=transport)

    def close(self) -> None:
        self._http.close()

    def post(self, case: RmaCase, index: int) -> str | None:
        """None when the ticket system took history line `index`, else why not."""
        link = f"{self._console}/rma/{case.id}" if self._console else None
        try:
            response = self._http.post(self._url, json=payload(case, index, link))
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if response.is_success:
            return None
        return f"HTTP {response.status_code}: {response.text[:200]}"

    def deliver_due(self, book: RmaBook, note: FailureNote | None = None) -> int:
        """Tell every due case's untold history lines, oldest first, each as its own event; a
        refusal stops that case's (its later events wait behind it). How many were taken."""
        taken = 0
        for case in book.due(book.clock.now()):
            index = case.untold()
            if index is None:
                book.delivered(case, None)  # nothing left to tell
            while index is not None:
                error = self.post(case, index)
                if error is not None:
                    self._failed(book, case, error, note)
                    break
                case = book.delivered(case, index)
                taken += 1
                index = case.untold()
        return taken

    def _failed(self, book: RmaBook, case: RmaCase, error: str, note: FailureNote | None) -> None:
        retry_in = backoff(case.webhook_attempts + 1, self._settings)
        failed = book.failed(case, error, retry_in)
        log.warning(
            "rma webhook for case %s failed (attempt %s, next in %s): %s",
            case.id,
            failed.webhook_attempts,
            retry_in,
            error,
        )
        if note is not None:
            note(failed, error, retry_in)
