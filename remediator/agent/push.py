"""Delivery to the controller's push API: the queue drained in batches, retried with capped
exponential backoff (and the server's Retry-After) until the controller takes them.

A 202 removes the batch; the items it lists as refused are logged at error, each with its
reason, and counted (`signals_refused`), never dropped without a word. A 422 took nothing: the
items it names are logged and counted the same way and dropped (they would be refused again),
the rest go again at once. 401/403, 5xx, a full or non-leading replica (503) and a transport
error keep everything queued, drop the connection (so the retry may reach another replica: the
one that leads) and back off; a controller that is down or failing over therefore loses nothing,
it only delays.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remediator.agent.http import HttpClient, Response, TransportError
from remediator.agent.queue import DurableQueue
from remediator.agent.stats import Stats

log = logging.getLogger(__name__)

SIGNALS_PATH = "/api/v1/signals"
HEARTBEAT_PATH = "/api/v1/agents/heartbeat"


@dataclass(frozen=True)
class Backoff:
    base: float = 0.1
    cap: float = 5.0
    retry_after_cap: float = 300.0  # a Retry-After beyond this is a broken server, not advice

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Jitter under a doubling ceiling. The server's Retry-After is obeyed whole (a 429 from
        a controller that is behind must slow the agent down), plus up to a fifth at random."""
        if retry_after is not None:
            return min(self.retry_after_cap, max(0.0, retry_after)) * random.uniform(1.0, 1.2)
        ceiling = min(self.cap, self.base * (2 ** min(attempt, 16)))
        return random.uniform(ceiling / 2, ceiling)


def retry_after(response: Response) -> float | None:
    raw = response.headers.get("retry-after", "")
    try:
        return float(raw)
    except ValueError:
        return None


def refused_indices(body: Any) -> set[int]:
    """The item indices a 422 names (the push API lists every bad item)."""
    found: set[int] = set()
    detail = body.get("detail") if isinstance(body, dict) else None
    for problem in detail if isinstance(detail, list) else ():
        index = problem.get("index") if isinstance(problem, dict) else None
        if isinstance(index, int):
            found.add(index)
    return found


class Pusher:
    """One thread: sends what is queued, sleeps until woken or a backoff ends."""

    def __init__(
        self,
        client: HttpClient,
        queue: DurableQueue,
        stats: Stats,
        *,
        batch: int = 500,
        backoff: Backoff | None = None,
        on_refused: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._client = client
        self._on_refused = on_refused
        self._queue = queue
        self._stats = stats
        self._batch = batch
        self._backoff = backoff or Backoff()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="push", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            self._wake.clear()
            outcome = self.send_once()
            if outcome is None:
                attempt = 0
                self._wake.wait()
            elif outcome == 0.0:
                attempt = 0
            else:
                attempt += 1
                self._wake.clear()
                self._stop.wait(self._backoff.delay(attempt, outcome if outcome > 0 else None))

    def send_once(self) -> float | None:
        """Send one batch. None: nothing queued; 0: sent (more may wait); > 0: retry after that
        many seconds; < 0: retry after the backoff."""
        batch = self._queue.peek(self._batch)
        if not batch:
            return None
        ids = [row_id for row_id, _ in batch]
        try:
            response = self._client.post(SIGNALS_PATH, [body for _, body in batch])
        except TransportError as exc:
            self._stats.add("push_errors")
            log.warning("push failed, %d signal(s) stay queued: %s", len(ids), exc)
            return -1.0
        if response.status in (200, 202, 422):
            body = _json(response)
            problems = _problems(body, "refused" if response.status != 422 else "detail")
            bad = {i for i in refused_indices({"detail": problems}) if 0 <= i < len(ids)}
            if response.status == 422 and not bad:
                bad = set(range(len(ids)))  # the whole body was refused
            for index in sorted(bad):
                reasons = "; ".join(
                    f"{p.get('field')}: {p.get('reason')}"
                    for p in problems
                    if p.get("index") in (index, None)
                )
                log.error(
                    "controller refused a signal, not sent again: %s (%s)",
                    json.dumps(batch[index][1], separators=(",", ":")),
                    reasons or response.text[:300],
                )
                if self._on_refused is not None:
                    self._on_refused(batch[index][1])
            if response.status == 422:
                # Nothing was taken: an item the answer does not name goes again.
                self._queue.remove([ids[i] for i in sorted(bad)])
            else:
                self._queue.remove(ids)
                self._stats.add("signals_sent", len(ids) - len(bad))
            self._stats.add("signals_refused", len(bad))
            return 0.0
        self._stats.add("push_errors")
        log.warning("push answered %d, %d signal(s) stay queued", response.status, len(ids))
        # The Service balances connections, not requests: a kept-alive connection to a replica
        # that does not lead (503) would get the same answer forever. Reconnect instead.
        self._client.close()
        after = retry_after(response)
        return after if after is not None and after > 0 else -1.0


def _problems(body: Any, key: str) -> list[dict[str, Any]]:
    found = body.get(key) if isinstance(body, dict) else None
    return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []


def _json(response: Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
