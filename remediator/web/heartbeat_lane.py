"""The heartbeats' own lane through the web app: 10,000 agents are 1,000 requests a second.

Through FastAPI's stack (the `http` middleware, routing, dependency solving) a heartbeat cost
~0.8 ms of CPU before its own work, which at 10,000 agents is most of a core taken from
everything else the controller does. This pure ASGI middleware sits outside that stack and
answers the common case itself — a push token by header, a body that validates — with the very
decision the route makes (`agents.take_heartbeat`) and the same headers and request metric.
Anything else (no or a wrong token, a cookie, a malformed or oversized body) goes on to the
route with the body replayed, so every error is answered, counted and documented in one place.

It also tells when the replica is behind: every tenth of a second a request schedules a probe
callback and the time it waits to run is the event loop's lag — what every request, a pushed
signal's included, waits now. Past `LAG_LIMIT` heartbeats get 429 with a spread Retry-After
(the agents obey), which lowers the request rate until signals are answered promptly again.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from remediator.signals.admission import Lane, Refusal, retry_after
from remediator.web.agents import HeartbeatIn, flush_quietly, take_heartbeat
from remediator.web.auth import authenticate, bearer_token
from remediator.web.deps import WebDeps
from remediator.web.metrics import ConsoleMetrics

PATH = "/api/v1/agents/heartbeat"
MAX_BODY = 64 * 1024  # a heartbeat is ~1 KB; anything bigger takes the ordinary path
# The event loop is behind when a callback made ready waits this long: every request, a pushed
# signal's included, waits as long in the same queue. Heartbeats are then turned away with a
# Retry-After spread over SHED_SPREAD seconds, so the agents' next ones come later and spread.
LAG_LIMIT = 0.25
SHED_SPREAD = 10.0
PROBE_EVERY = 0.1


class HeartbeatLane:
    def __init__(
        self,
        app: ASGIApp,
        deps: WebDeps,
        metrics: ConsoleMetrics,
        headers: dict[str, str],
        lag_limit: float = LAG_LIMIT,
    ) -> None:
        self.app = app
        self.lag_limit = lag_limit
        self.deps = deps
        self.metrics = metrics
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        self._flushes: set[asyncio.Future[None]] = set()
        self.lag = 0.0  # seconds a ready callback last waited on this loop
        # The request metric's series by status: `labels()` per heartbeat (a lock, a tuple
        # key, label checks) was the lane's largest Python cost at 1,000 heartbeats a second.
        self._timings: dict[int, Any] = {}
        self._probed_at = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        if started - self._probed_at >= PROBE_EVERY:
            self._probed_at = started
            asyncio.get_running_loop().call_soon(self._probed, started)
        headers = dict(scope["headers"])
        body, complete = await _read(receive)
        if complete and self._pusher(headers):
            try:
                parsed = HeartbeatIn.model_validate_json(body)
            except ValidationError:
                parsed = None
            if parsed is not None:
                await self._answer(parsed, send, started)
                return
        await self.app(scope, _replay(body, receive, complete), send)

    def _pusher(self, headers: dict[bytes, bytes]) -> bool:
        """A token by header that may push: push-only or operator, as `require_pusher` (which
        answers every other case)."""
        raw = headers.get(b"authorization", b"").decode("latin-1")
        token = bearer_token(raw)
        principal = authenticate(self.deps.settings.web, token) if token else None
        return principal is not None and principal.can_push

    def _probed(self, scheduled: float) -> None:
        self.lag = time.monotonic() - scheduled

    async def _answer(self, body: HeartbeatIn, send: Send, started: float) -> None:
        if self.lag > self.lag_limit:
            status, answer, extra, flush = shed(self.deps, body.node, self.lag)
        else:
            status, answer, extra, flush = take_heartbeat(self.deps, body)
        payload = json.dumps(answer, separators=(",", ":")).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"cache-control", b"no-store"),
                    *self.headers,
                    *((k.lower().encode(), v.encode()) for k, v in extra.items()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})
        timing = self._timings.get(status)
        if timing is None:
            timing = self._timings[status] = self.metrics.http.labels(PATH, "POST", str(status))
        timing.observe(time.monotonic() - started)
        if flush:  # after the answer, off the event loop, like the route's background task
            future = asyncio.get_running_loop().run_in_executor(
                None, flush_quietly, self.deps.heartbeats
            )
            self._flushes.add(future)
            future.add_done_callback(self._flushes.discard)


def shed(deps: WebDeps, node: str, lag: float) -> tuple[int, dict[str, Any], dict[str, str], bool]:
    """A heartbeat turned away because the replica is behind: 429, counted as overloaded."""
    assert deps.admission is not None
    deps.admission.count(Lane.HEARTBEAT, node, Refusal.OVERLOADED)
    after = retry_after(lag, SHED_SPREAD)
    reason = f"this replica is behind ({lag:.2f} s queued): retry after {after} s"
    return (
        429,
        {"reason": reason, "detail": Refusal.OVERLOADED.value},
        {"Retry-After": str(after)},
        False,
    )


async def _read(receive: Receive) -> tuple[bytes, bool]:
    """Up to MAX_BODY bytes; `complete` False when the body was bigger (or the client left)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > MAX_BODY:
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive, complete: bool) -> Receive:
    """The body already read, then (if it was not all read) the rest from the client."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not complete}
        return await receive()

    return replayed
