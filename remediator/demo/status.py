"""A line on the terminal whenever the remediations' states change, read from the console's JSON
API with the demo's operator token: the same view an on-call script would have."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from remediator.model.states import State

# The order a reader follows: work under way, then what waits for people, then outcomes.
ORDER = (
    State.DETECTED,
    State.QUARANTINED,
    State.CHECKPOINTING,
    State.DRAINING,
    State.REPLACING,
    State.VERIFYING,
    State.QUEUED,
    State.AWAITING_APPROVAL,
    State.HELD_BY_OPT_OUT,
    State.HELD,
    State.FAILED,
    State.SUCCEEDED,
    State.CANCELLED,
)
PAGE_LIMIT = 500


def summarize(items: Iterable[Mapping[str, Any]]) -> str:
    """`{"state": …}` items → "2 draining · 1 awaiting_approval · 3 succeeded"."""
    counts = Counter(str(item.get("state")) for item in items)
    if not counts:
        return "no remediations yet"
    known = [s.value for s in ORDER]
    parts = [f"{counts[s]} {s}" for s in known if counts[s]]
    parts.extend(f"{n} {s}" for s, n in sorted(counts.items()) if s not in known)
    return " · ".join(parts)


def fetch_all(client: httpx.Client, console_url: str, token: str) -> list[dict[str, Any]]:
    """Every remediation, following the API's cursor."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": PAGE_LIMIT}
        if cursor:
            params["cursor"] = cursor
        response = client.get(
            f"{console_url.rstrip('/')}/api/v1/remediations",
            params=params,
            headers={"Authorization": f"Bearer {token}"},
        )
        response.raise_for_status()
        page = response.json()
        items.extend(page["items"])
        cursor = page.get("next_cursor")
        if not cursor:
            return items


class StatusReporter:
    def __init__(
        self,
        console_url: str,
        token: str,
        say: Callable[[str], None],
        interval: float = 3.0,
    ) -> None:
        self._url = console_url
        self._token = token
        self._say = say
        self._interval = interval
        self.last: str | None = None

    def run(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=10.0) as client:
            while not stop.wait(self._interval):
                try:
                    line = summarize(fetch_all(client, self._url, self._token))
                except httpx.HTTPError:
                    continue
                if line != self.last:
                    self.last = line
                    self._say(f"remediations: {line}")
