"""Kubernetes API faults: an ASGI middleware in front of the simulated API server that makes it
misbehave the way a sick control plane does, and counts every request it sees.

Rules (set over the inject API, `POST /v1/kube-faults`) match requests by the verb and resource
the real apiserver's request-info resolver derives (GET on a collection is `list`, `?watch=1` is
`watch`, PUT is `update`, an eviction POST is `create` on `pods/eviction`) and optionally by a
User-Agent substring (one replica cut off from the apiserver). They answer the apiserver's own
`Status` bodies: 429 TooManyRequests (API Priority and Fairness) with `Retry-After` and
`details.retryAfterSeconds`, 503 ServiceUnavailable, 500 InternalError; add latency; drop the
connection mid-response; or end watches with a 410 Expired ERROR event, as the watch cache does
when a client resumes from a compacted resourceVersion. A rule lasts `count` matching requests,
`duration_seconds`, or until cleared. Faulted requests never reach the server, so nothing they
asked for happened.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

Verb = Literal["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
REQUEST_LOG = 50_000
# Set in the ASGI scope by the RBAC middleware (rbac.py) for a ServiceAccount's request.
USER_KEY = "sim.user"
_REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verbs: list[Verb] | None = None
    resources: list[str] | None = Field(
        default=None, description='"pods", "pods/eviction", "leases", "nodes/status", …'
    )
    user_agent: str | None = Field(default=None, description="only clients whose UA contains it")
    count: int | None = Field(default=None, ge=1, le=1_000_000)
    duration_seconds: float | None = Field(default=None, gt=0, le=86_400)


class ErrorFault(_Rule):
    type: Literal["error"]
    status: Literal[429, 500, 503] = 503
    retry_after: int | None = Field(default=None, ge=0, le=3600)
    message: str | None = None


class DelayFault(_Rule):
    type: Literal["delay"]
    seconds: float = Field(gt=0, le=300)


class ResetFault(_Rule):
    """The connection drops after the status line: the client gets no usable answer."""

    type: Literal["reset"]


class WatchGoneFault(_Rule):
    """Open watches end now (`gone`: with a 410 Expired ERROR event; `close`: cleanly, as at
    their timeout); while the rule lasts, watches resuming from a resourceVersion get the 410."""

    type: Literal["watch_gone"]
    mode: Literal["gone", "close"] = "gone"


class ClearKubeFaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["clear"]


KubeFault = Annotated[
    ErrorFault | DelayFault | ResetFault | WatchGoneFault | ClearKubeFaults,
    Field(discriminator="type"),
]
KUBE_FAULT = TypeAdapter(KubeFault)


@dataclass(frozen=True)
class RequestInfo:
    """What the apiserver's request-info resolver makes of a request; `resource` is None for
    non-resource paths (discovery, /version, health)."""

    verb: str
    resource: str | None
    namespace: str = ""
    name: str = ""
    resource_version: str = ""


def request_info(method: str, path: str, query: str) -> RequestInfo:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        rest = parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        rest = parts[3:]
    else:
        return RequestInfo(method.lower(), None)
    if not rest:
        return RequestInfo(method.lower(), None)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    params = parse_qs(query)
    watching = (params.get("watch") or [""])[0].lower() in ("1", "true")
    rv = (params.get("resourceVersion") or [""])[0]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    name = rest[1] if len(rest) >= 2 else ""
    collection = {"GET": "watch" if watching else "list", "POST": "create"}
    single = {
        "GET": "watch" if watching else "get",
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete",
    }
    if name:
        verb = single.get(method, method.lower())
    else:
        verb = collection.get(method, "deletecollection" if method == "DELETE" else method.lower())
    return RequestInfo(verb, resource, namespace, name, rv)


def status_body(status: int, message: str, retry_after: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(status, "InternalError"),
        "code": status,
    }
    details: dict[str, Any] = {}
    if status == 500:
        details["causes"] = [{"message": message.removeprefix("Internal error occurred: ")}]
    if retry_after is not None:
        details["retryAfterSeconds"] = retry_after
    if details:
        body["details"] = details
    return body


def default_message(status: int) -> str:
    if status == 429:
        return "Too many requests, please try again later."
    if status == 503:
        return "The server is currently unable to handle the request"
    return "Internal error occurred: etcdserver: request timed out"


def expired_event(resource_version: str, current: int) -> bytes:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {resource_version or 0} ({current})",
        "reason": "Expired",
        "code": 410,
    }
    return json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"


@dataclass
class _Active:
    rule: ErrorFault | DelayFault | ResetFault | WatchGoneFault
    remaining: int | None
    until: float | None

    def live(self, now: float) -> bool:
        return (self.remaining is None or self.remaining > 0) and (
            self.until is None or now < self.until
        )

    def matches(self, info: RequestInfo, user_agent: str) -> bool:
        rule = self.rule
        return (
            (rule.verbs is None or info.verb in rule.verbs)
            and (rule.resources is None or info.resource in rule.resources)
            and (rule.user_agent is None or rule.user_agent in user_agent)
        )


@dataclass(eq=False)
class _Watch:
    loop: asyncio.AbstractEventLoop
    ended: asyncio.Event
    info: RequestInfo
    user_agent: str
    mode: list[str] = field(default_factory=list)


class KubeFaults:
    """The rules and the request log, shared by the kube app (another thread's event loop) and
    the inject app."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Active] = []
        self._watches: set[_Watch] = set()
        self._log: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG)
        self._seq = 0
        self._counts: Counter[str] = Counter()
        self._started = time.monotonic()
        # Every RBAC refusal of a ServiceAccount, kept apart from the bounded log: a test's last
        # word on whether the shipped roles were enough.
        self._forbidden: deque[dict[str, Any]] = deque(maxlen=1000)

    # -- rules -------------------------------------------------------------------------------

    def apply(
        self, fault: ErrorFault | DelayFault | ResetFault | WatchGoneFault | ClearKubeFaults
    ) -> str:
        if isinstance(fault, ClearKubeFaults):
            with self._lock:
                self._rules.clear()
            return "Kubernetes API faults cleared"
        until = time.monotonic() + fault.duration_seconds if fault.duration_seconds else None
        active = _Active(fault, fault.count, until)
        ended = 0
        with self._lock:
            self._rules.append(active)
            if isinstance(fault, WatchGoneFault):
                for watch in list(self._watches):
                    if active.matches(watch.info, watch.user_agent):
                        watch.mode.append(fault.mode)
                        watch.loop.call_soon_threadsafe(watch.ended.set)
                        ended += 1
        return describe(fault) + (f"; {ended} open watch(es) ended" if ended else "")

    def active(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        with self._lock:
            self._rules = [a for a in self._rules if a.live(now)]
            return [
                {
                    **a.rule.model_dump(exclude_none=True),
                    **({"remaining": a.remaining} if a.remaining is not None else {}),
                    **({"seconds_left": round(a.until - now, 3)} if a.until is not None else {}),
                }
                for a in self._rules
            ]

    def _take(self, info: RequestInfo, user_agent: str, kinds: tuple[type, ...]) -> list[Any]:
        """The live rules of these kinds that match, each charged one use."""
        now = time.monotonic()
        taken = []
        with self._lock:
            for active in self._rules:
                if not isinstance(active.rule, kinds) or not active.live(now):
                    continue
                if not active.matches(info, user_agent):
                    continue
                if active.remaining is not None:
                    active.remaining -= 1
                taken.append(active.rule)
        return taken

    # -- the request log ---------------------------------------------------------------------

    def record(
        self,
        info: RequestInfo,
        status: int,
        user_agent: str,
        injected: str | None,
        user: str | None = None,
    ) -> None:
        with self._lock:
            self._seq += 1
            key = f"{info.verb} {info.resource}"
            self._counts[key] += 1
            self._log.append(
                {
                    "seq": self._seq,
                    "at": round(time.monotonic() - self._started, 3),
                    "verb": info.verb,
                    "resource": info.resource,
                    "namespace": info.namespace,
                    "name": info.name,
                    "status": status,
                    "user_agent": user_agent,
                    **({"injected": injected} if injected else {}),
                    **({"user": user} if user else {}),
                }
            )

    def refused(self, info: RequestInfo, group: str, user: str, message: str) -> None:
        """An RBAC refusal (rbac.py calls this for each 403 it answers)."""
        with self._lock:
            self._forbidden.append(
                {
                    "seq": self._seq + 1,
                    "user": user,
                    "verb": info.verb,
                    "group": group,
                    "resource": info.resource,
                    "namespace": info.namespace,
                    "name": info.name,
                    "message": message,
                }
            )

    def requests(self, since: int = 0) -> dict[str, Any]:
        with self._lock:
            return {
                "total": self._seq,
                "counts": dict(sorted(self._counts.items())),
                "requests": [r for r in self._log if r["seq"] > since],
            }

    def forbidden(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._forbidden)

    # -- watches -----------------------------------------------------------------------------

    def open_watch(self, info: RequestInfo, user_agent: str) -> _Watch:
        watch = _Watch(asyncio.get_running_loop(), asyncio.Event(), info, user_agent)
        with self._lock:
            self._watches.add(watch)
        return watch

    def close_watch(self, watch: _Watch) -> None:
        with self._lock:
            self._watches.discard(watch)


def describe(fault: ErrorFault | DelayFault | ResetFault | WatchGoneFault) -> str:
    scope = []
    if fault.verbs:
        scope.append("/".join(fault.verbs))
    scope.append(", ".join(fault.resources) if fault.resources else "any resource")
    if fault.user_agent:
        scope.append(f"from clients like {fault.user_agent!r}")
    if fault.count:
        lasting = f"for the next {fault.count} matching request(s)"
    elif fault.duration_seconds:
        lasting = f"for {fault.duration_seconds:g}s"
    else:
        lasting = "until cleared"
    what = " ".join(scope)
    if isinstance(fault, ErrorFault):
        after = f" with Retry-After: {fault.retry_after}" if fault.retry_after is not None else ""
        return f"{what} answer {fault.status}{after} {lasting}"
    if isinstance(fault, DelayFault):
        return f"{what} answered {fault.seconds:g}s late {lasting}"
    if isinstance(fault, ResetFault):
        return f"{what} lose their connection {lasting}"
    return f"watches of {what} end ({fault.mode}) and resuming ones get 410 {lasting}"


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


class KubeFaultMiddleware:
    """Wraps the simulated API server's ASGI app."""

    def __init__(
        self, app: ASGIApp, faults: KubeFaults, current_version: Callable[[], int] = lambda: 0
    ) -> None:
        self.app = app
        self.faults = faults
        self._current = current_version

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        info = request_info(
            scope["method"], scope["path"], bytes(scope.get("query_string", b"")).decode()
        )
        agent = _header(scope, b"user-agent")
        if info.resource is None:
            await self.app(scope, receive, send)
            return
        for delay in self.faults._take(info, agent, (DelayFault,)):
            await asyncio.sleep(delay.seconds)
        failing = self.faults._take(info, agent, (ErrorFault, ResetFault))
        if failing:
            await self._fail(failing[0], info, agent, send)
            return
        if info.verb == "watch":
            await self._watch(scope, receive, send, info, agent)
            return
        status = [0]

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        await self.app(scope, receive, counting)
        self.faults.record(info, status[0], agent, None, scope.get(USER_KEY))

    async def _fail(
        self, rule: ErrorFault | ResetFault, info: RequestInfo, agent: str, send: Send
    ) -> None:
        if isinstance(rule, ResetFault):
            self.faults.record(info, 0, agent, "reset")
            # A started response that never completes: uvicorn drops the connection.
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"64")],
                }
            )
            return
        message = rule.message or default_message(rule.status)
        if rule.status == 500 and not message.startswith("Internal error occurred"):
            message = f"Internal error occurred: {message}"
        body = json.dumps(status_body(rule.status, message, rule.retry_after)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        if rule.retry_after is not None:
            headers.append((b"retry-after", str(rule.retry_after).encode()))
        self.faults.record(info, rule.status, agent, "error")
        await send({"type": "http.response.start", "status": rule.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _watch(
        self, scope: Scope, receive: Receive, send: Send, info: RequestInfo, agent: str
    ) -> None:
        resuming = info.resource_version not in ("", "0")
        if resuming and self.faults._take(info, agent, (WatchGoneFault,)):
            self.faults.record(info, 200, agent, "watch_gone")
            await _send_lines(send, expired_event(info.resource_version, self._current()))
            return
        watch = self.faults.open_watch(info, agent)
        started = [False]
        stopped = [False]

        async def guarded(message: Message) -> None:
            if stopped[0]:
                raise asyncio.CancelledError
            if message["type"] == "http.response.start":
                started[0] = True
            await send(message)

        self.faults.record(info, 200, agent, None)
        app = asyncio.ensure_future(self.app(scope, receive, guarded))
        ended = asyncio.ensure_future(watch.ended.wait())
        try:
            done, _ = await asyncio.wait({app, ended}, return_when=asyncio.FIRST_COMPLETED)
            if app in done:
                app.result()
                return
            stopped[0] = True
            app.cancel()
            await asyncio.gather(app, return_exceptions=True)
            line = (
                expired_event(info.resource_version, self._current())
                if "gone" in watch.mode
                else b""
            )
            if started[0]:
                await send({"type": "http.response.body", "body": line, "more_body": False})
            else:
                await _send_lines(send, line)
        finally:
            ended.cancel()
            self.faults.close_watch(watch)


async def _send_lines(send: Send, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
