"""The agent's heartbeat: when to send the next one.

10,000 agents on a fixed period would stay in step after anything that lined them up (a
controller restart, a DaemonSet rollout) and hit the controller as one wave every 10 s. So each
interval is the period ±`spread` at random; a 429's Retry-After is obeyed, plus up to half again
at random so the agents it turned away together do not return together. A large fleet's
controller asks for a longer period in its answer (`next_heartbeat_seconds`, for its heartbeat
budget: model/heartbeats.py); the agent keeps the longer of that and its own.

After a failure (a controller restarting, say) the agent retries within `reconnect` seconds
(from a third of it, at random) for the first two thirds of it, then at its period, doubling from
its own up to `cap` when that is longer. So an agent that failed during a restart is back within
`reconnect` of the controller's return, and the retries add at most one more steady rate of
requests: only the agents that failed in the last `reconnect` seconds retry sooner than their
period, and those are the ones a steady rate brings (a 1,000 s period at 10,000 agents: a 15 s
restart fails ~150 agents, back within 55 s, under twice the steady rate in the busiest 5 s;
the agents that never met the restart never notice it). A controller down for long sees each
agent about once a period.

`Pacing.delay` is pure given its random draw; `HeartbeatLoop` is the thin executor.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remediator.agent.http import HttpClient, Response, TransportError
from remediator.agent.push import HEARTBEAT_PATH
from remediator.agent.stats import Stats
from remediator.model.heartbeats import MAX_ASKED_SECONDS

log = logging.getLogger(__name__)

Draw = Callable[[float, float], float]


@dataclass(frozen=True)
class Beat:
    """One heartbeat's outcome: sent, or not and (when the server said) when to try again."""

    ok: bool
    retry_after: float | None = None
    asked: float | None = None  # the least period the controller asked for
    send_hardware: bool = False  # the controller asks for the host's identity whole


def whole_due(due: bool, beat: Beat) -> bool:
    """Whether the next heartbeat carries the host's identity whole: until one is answered,
    as the answer says (`send_hardware`); a heartbeat not answered leaves it as it was."""
    return beat.send_hardware if beat.ok else due


@dataclass(frozen=True)
class Pacing:
    period: float = 10.0
    spread: float = 0.2
    cap: float = 30.0
    reconnect: float = 55.0

    def delay(
        self,
        failures: int,
        retry_after: float | None,
        draw: Draw = random.uniform,
        asked: float | None = None,
        failing_for: float = 0.0,
    ) -> float:
        """Seconds until the next heartbeat, after `failures` failures in a row, the first of
        them `failing_for` seconds ago; `asked` the least period the controller last asked for."""
        if retry_after is not None and retry_after > 0:
            return retry_after * draw(1.0, 1.5)
        period = max(self.period, min(asked or 0.0, MAX_ASKED_SECONDS))
        if failures > 0 and failing_for < self.reconnect * 2 / 3:
            window = min(self.reconnect, period)
            return draw(window / 3, window)
        if failures > 0:
            period = max(period, min(self.cap, self.period * 2 ** min(failures, 16)))
        return period * draw(1.0 - self.spread, 1.0 + self.spread)


def judge(status: int, headers: dict[str, str], text: str = "") -> Beat:
    """An answer as a Beat: 200 sent (with the period the controller asks, when it says one);
    429/503 with a Retry-After, wait that; anything else failed (the backoff decides)."""
    if status == 200:
        answer = _answer(text)
        return Beat(True, asked=_asked(answer), send_hardware=answer.get("send_hardware") is True)
    raw = headers.get("retry-after", "")
    try:
        after: float | None = float(raw)
    except ValueError:
        after = None
    return Beat(False, after if status in (429, 503) else None)


def _answer(text: str) -> dict[str, Any]:
    """A 200 answer's JSON object; empty when it is none (an older controller, a proxy's page)."""
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _asked(answer: dict[str, Any]) -> float | None:
    """`next_heartbeat_seconds` of a 200 answer; None when absent or not a sane number: the
    agent then keeps its own period."""
    value = answer.get("next_heartbeat_seconds")
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return float(value)


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
        on_beat: Callable[[Beat], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_beat = on_beat
        self._monotonic = monotonic
        self._failing_since = 0.0
        self._client = client
        self._body = body
        self._stats = stats
        self.pacing = pacing
        self._draw = draw
        self.failures = 0
        self.asked: float | None = None

    def send(self) -> Beat:
        try:
            response: Response = self._client.post(HEARTBEAT_PATH, self._body())
        except TransportError as exc:
            self._stats.add("heartbeat_errors")
            log.warning("heartbeat failed: %s", exc)
            return Beat(False)
        beat = judge(response.status, response.headers, response.text)
        if not beat.ok:
            self._stats.add("heartbeat_errors")
            if response.status == 429:
                self._stats.add("heartbeat_throttled")
            log.warning("heartbeat answered %d: %s", response.status, response.text[:300])
        if self._on_beat is not None:
            self._on_beat(beat)
        return beat

    def run_once(self) -> float:
        """Send one heartbeat; the seconds to wait before the next."""
        beat = self.send()
        now = self._monotonic()
        if not beat.ok and self.failures == 0:
            self._failing_since = now
        self.failures = 0 if beat.ok else self.failures + 1
        if beat.ok:
            self.asked = beat.asked
        return self.pacing.delay(
            self.failures, beat.retry_after, self._draw, self.asked, now - self._failing_since
        )

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            stop.wait(self.run_once())
