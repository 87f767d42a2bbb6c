"""Alertmanager's own API (v2), read for the alerts it is firing to our receiver.

The webhook tells remediator about an alert once; `FiringAlerts` holds it from there. A replica
that starts leading (a restart, a failover) holds nothing yet, and Alertmanager would not tell
it again before `repeat_interval` (4 h). So the leader reads `GET /api/v2/alerts` once when it
starts polling: every active, unsilenced, uninhibited alert routed to the remediator receiver,
with its own `startsAt`. Errors are wrapped as TransientError; the caller retries next poll.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from pydantic import TypeAdapter, ValidationError

from remediator.errors import TransientError
from remediator.signals.sources.alertmanager import Alert

DEFAULT_RECEIVER = "remediator"


def _alert(raw: dict[str, Any]) -> dict[str, Any]:
    """API v2 `gettableAlert` → the webhook's alert shape (status from `status.state`)."""
    state = (raw.get("status") or {}).get("state")
    return {
        "status": "firing" if state == "active" else "resolved",
        "labels": raw.get("labels") or {},
        "annotations": raw.get("annotations") or {},
        "startsAt": raw.get("startsAt"),
        "endsAt": raw.get("endsAt") or "0001-01-01T00:00:00Z",
        "generatorURL": raw.get("generatorURL") or "",
        "fingerprint": raw.get("fingerprint") or "",
    }


_ALERTS = TypeAdapter(list[Alert])


class AlertmanagerAPI:
    def __init__(
        self, url: str, receiver: str = DEFAULT_RECEIVER, timeout_seconds: float = 10.0
    ) -> None:
        self.url = url.rstrip("/")
        self.receiver = receiver
        self._client = httpx.Client(timeout=timeout_seconds)

    def close(self) -> None:
        self._client.close()

    def firing(self) -> list[Alert]:
        params = {
            "active": "true",
            "silenced": "false",
            "inhibited": "false",
            "receiver": f"^{re.escape(self.receiver)}$",
        }
        try:
            response = self._client.get(f"{self.url}/api/v2/alerts", params=params)
        except httpx.HTTPError as exc:
            raise TransientError(f"Alertmanager {self.url} unreachable: {exc}") from exc
        if response.status_code != 200:
            raise TransientError(
                f"Alertmanager {self.url} answered {response.status_code}: {response.text[:200]}"
            )
        try:
            body = response.json()
            if not isinstance(body, list):
                raise ValueError("not a JSON list")
            return _ALERTS.validate_python([_alert(item) for item in body])
        except (ValueError, ValidationError, AttributeError) as exc:
            raise TransientError(f"Alertmanager {self.url}: unreadable alert list: {exc}") from exc
