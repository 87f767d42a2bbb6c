"""The agent's heartbeat: when to send the next one.

10,000 agents on a fixed period would stay in step after anything that lined them up (a
controller restart, a DaemonSet rollout) and hit the controller as one wave every 10 s. So each
interval is the period ±`spread` at random; after a failure the next try waits a jittered,
doubling delay (from one period up to `cap`), so a controller that is down sees fewer requests,
not more, and the agents come back spread over the cap; a 429's Retry-After is obeyed, plus up
to half again at random so the agents it turned away together do not return together.

`Pacing.delay` is pure given its random draw; `HeartbeatLoop` is the thin executor.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remediator.agent.http import HttpClient, Response, TransportError
from remediator.agent.push import HEARTBEAT_PATH
from remediator.agent.stats import Stats

log = logging.getLogger(__name__)

Draw = Callable[[float, float], float]


@dataclass(frozen=True)
class Beat:
    """One heartbeat's outcome: sent, or not and (when the server said) when to try again."""

    ok: bool
    retry_after: float | None = None


@dataclass(frozen=True)
class Pacing:
    period: float = 10.0
    spread: float = 0.2
    cap: float = 30.0

    def delay(self, failures: int, retry_after: float | None, draw: Draw = random.uniform) -> float:
        """Seconds until the next heartbeat, after `failures` failures in a row."""
        if retry_after is not None and retry_after > 0:
            return retry_after * draw(1.0, 1.5)
        if failures <= 0:
            return self.period * draw(1.0 - self.spread, 1.0 + self.spread)
        ceiling = min(self.cap, self.period * 2 ** min(failures, 16))
        return draw(ceiling / 2, ceiling)


def judge(status: int, headers: dict[str, str]) -> Beat:
    """An answer as a Beat: 200 sent; 429/503 with a Retry-After, wait that; anything else
    failed (the backoff decides)."""
    if status == 200:
        return Beat(True)
    raw = headers.get("retry-after", "")
    try:
        after: float | None = float(raw)
    except ValueError:
        after = None
    return Beat(False, after if status in (429, 503) else None)


class HeartbeatLoop:
    """Sends `body()` every `pacing` interval until stopped."""

    def __init__(
        self,
        client: HttpClient,
        body: Callable[[], dict[str, Any]],
        stats: Stats,
        pacing: Pacing,
        *,
        draw: Draw = random.uniform,
    ) -> None:
        self._client = client
        self._body = body
        self._stats = stats
        self.pacing = pacing
        self._draw = draw
        self.failures = 0

    def send(self) -> Beat:
        try:
            response: Response = self._client.post(HEARTBEAT_PATH, self._body())
        except TransportError as exc:
            self._stats.add("heartbeat_errors")
            log.warning("heartbeat failed: %s", exc)
            return Beat(False)
        beat = judge(response.status, response.headers)
        if not beat.ok:
            self._stats.add("heartbeat_errors")
            if response.status == 429:
                self._stats.add("heartbeat_throttled")
            log.warning("heartbeat answered %d: %s", response.status, response.text[:300])
        return beat

    def run_once(self) -> float:
        """Send one heartbeat; the seconds to wait before the next."""
        beat = self.send()
        self.failures = 0 if beat.ok else self.failures + 1
        return self.pacing.delay(self.failures, beat.retry_after, self._draw)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            stop.wait(self.run_once())
