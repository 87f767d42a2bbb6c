"""Push API: signals that other systems send us, and the Alertmanager webhook.

Both endpoints write into a `SignalInbox`, which the controller drains once per cycle (the
inbox is itself a Source, so it sits in the same list as the polled ones). Each item is judged
on its own: a bad one (out of bounds, see `signals.bounds`, a reading older than `max_age`, an
event older than `event_max_age`) is refused with its index and reason, and counted, and the
rest of the batch goes on, so one broken reading cannot hold back an XID 79 pushed beside it;
the answer (202) lists what was refused, which a client must not resend (it would be refused
again). A signal for a node the cluster does not have, or for a GPU index beyond the node's
GPUs, is refused the same way at the door (`signals.screen`, against the node cache), rather
than taken and dropped unseen by the intake. A batch is a 422 only when nothing was taken and
it breaks the published schema; one the schema allows is judged item by item on rules no schema
can state (its age, `since` after `observed_at`, its node) and answered 202 even when nothing was
taken. Items are read as their JSON types (`signals.wire`): `true` is not 1, nor a number a
time. A full inbox answers 503 for the whole batch, which Alertmanager retries, rather than
dropping signals silently.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.params import Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from remediator.clock import Clock, SystemClock
from remediator.signals import bounds
from remediator.signals.admission import Admission, Lane, Refusal, retry_after
from remediator.signals.kinds import EVENT_KINDS, SignalKind
from remediator.signals.model import SINCE_AFTER_OBSERVED, Signal
from remediator.signals.screen import DropReason, screen
from remediator.signals.sources.alert_state import FiringAlerts
from remediator.signals.sources.alertmanager import (
    AlertMapping,
    PayloadError,
    Webhook,
    map_webhook,
    parse_webhook,
)
from remediator.signals.sources.base import HealthTracker, SourceResult

MAX_BATCH = 5_000
MAX_FUTURE_SKEW = timedelta(minutes=5)
# A pushed reading older than this is history, not news: a replayed queue or a wrong clock
# must not open a remediation at once (settings: signals.push_max_age_seconds).
DEFAULT_MAX_AGE = timedelta(minutes=5)
# An event (EVENT_KINDS: an XID the kernel logged) keeps its meaning: one a node agent queued
# through a controller outage is taken up to this old and decided by its own time
# (settings: signals.push_event_max_age_seconds).
DEFAULT_EVENT_MAX_AGE = timedelta(days=1)

# Which of these nodes the cluster has → its GPU count (None: not said); None: cannot say yet.
NodeGpus = Callable[[Sequence[str]], Mapping[str, int | None] | None]
# What a refusal at the door is counted as (signals.admission), and the field it names.
DOOR_REFUSALS: Mapping[DropReason, tuple[Refusal, str]] = {
    DropReason.UNKNOWN_NODE: (Refusal.UNKNOWN_NODE, "node"),
    DropReason.GPU_OUT_OF_RANGE: (Refusal.GPU_OUT_OF_RANGE, "gpu"),
}


class InboxUnavailable(Exception):
    """The inbox cannot take signals now; the sender should retry later (503)."""


class InboxFull(InboxUnavailable):
    """The controller is not draining fast enough."""


class SignalInbox:
    """Thread-safe, bounded queue between the web handlers and the controller cycle."""

    def __init__(
        self, capacity: int = 100_000, name: str = "push", alerts: FiringAlerts | None = None
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.name = name
        self.capacity = capacity
        # The webhook's firing alerts, held between notifications; a source of its own, which
        # the controller polls beside the others.
        self.alerts = alerts if alerts is not None else FiringAlerts()
        self._queue: deque[Signal] = deque()
        self._lock = threading.Lock()
        self._health = HealthTracker(name)
        self._accepted = 0
        self._refused = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    def put(self, signals: Sequence[Signal]) -> int:
        """Queue all of `signals` or none (InboxFull); returns how many were queued."""
        with self._lock:
            if len(self._queue) + len(signals) > self.capacity:
                self._refused += len(signals)
                raise InboxFull(
                    f"inbox full ({len(self._queue)} of {self.capacity} queued); retry later"
                )
            self._queue.extend(signals)
            self._accepted += len(signals)
            return len(signals)

    def drain(self) -> tuple[Signal, ...]:
        with self._lock:
            taken = tuple(self._queue)
            self._queue.clear()
            return taken

    def poll(self, now: datetime) -> SourceResult:
        """Passive source: it is up whenever the process is; the detail shows the flow."""
        signals = self.drain()
        with self._lock:
            detail = {"accepted_total": str(self._accepted), "refused_total": str(self._refused)}
        return self._health.ok(now, signals, detail)


def validate_batch(
    payload: Any,
    now: datetime,
    max_age: timedelta = DEFAULT_MAX_AGE,
    event_max_age: timedelta = DEFAULT_EVENT_MAX_AGE,
) -> tuple[list[Signal], list[dict[str, Any]]]:
    """Pure: decoded JSON → (the acceptable signals, one problem per refusal). A problem with
    `index` None concerns the body and refuses the whole batch."""
    taken, problems = _validate_items(payload, now, max_age, event_max_age)
    return [signal for _, signal in taken], problems


def _validate_items(
    payload: Any, now: datetime, max_age: timedelta, event_max_age: timedelta
) -> tuple[list[tuple[int, Signal]], list[dict[str, Any]]]:
    """`validate_batch` with each acceptable signal's index in the batch."""
    if not isinstance(payload, list):
        return [], [{"index": None, "field": "body", "reason": "must be a JSON list of signals"}]
    if len(payload) > MAX_BATCH:
        reason = f"at most {MAX_BATCH} signals per request, got {len(payload)}"
        return [], [{"index": None, "field": "body", "reason": reason}]
    signals: list[tuple[int, Signal]] = []
    problems: list[dict[str, Any]] = []
    for index, item in enumerate(payload):
        try:
            signal = Signal.model_validate(item)
        except ValidationError as exc:
            problems.extend(
                {
                    "index": index,
                    "field": ".".join(str(p) for p in err["loc"]) or "item",
                    "reason": err["msg"],
                }
                for err in exc.errors()
            )
            continue
        if signal.observed_at > now + MAX_FUTURE_SKEW:
            problems.append(
                {
                    "index": index,
                    "field": "observed_at",
                    "reason": f"{signal.observed_at.isoformat()} is in the future "
                    f"(server time {now.isoformat()})",
                }
            )
            continue
        event = signal.kind in EVENT_KINDS
        bound = event_max_age if event else max_age
        if signal.observed_at < now - bound:
            why = (
                f"an event that old is outside the {signal.kind.value} window"
                if event
                else "a reading that old is not evidence of the node's state now"
            )
            problems.append(
                {
                    "index": index,
                    "field": "observed_at",
                    "reason": f"{signal.observed_at.isoformat()} is older than "
                    f"{bound.total_seconds():g} s (server time {now.isoformat()}): {why}",
                }
            )
            continue
        signals.append((index, signal))
    return signals, problems


def screen_at_door(
    taken: Sequence[tuple[int, Signal]], gpus: Mapping[str, int | None]
) -> tuple[list[tuple[int, Signal]], list[tuple[dict[str, Any], Signal, Refusal]]]:
    """Pure: the signals the cluster can have, and a problem for each it cannot (the screen
    the intake applies, said to the sender with the item's index)."""
    screened = screen([signal for _, signal in taken], gpus)
    kept = {id(signal) for signal in screened.kept}
    index_of = {id(signal): index for index, signal in taken}
    refused = []
    for drop in screened.dropped:
        refusal, field = DOOR_REFUSALS[drop.reason]
        problem = {"index": index_of[id(drop.signal)], "field": field, "reason": drop.detail}
        refused.append((problem, drop.signal, refusal))
    return [(i, s) for i, s in taken if id(s) in kept], refused


def breaks_schema(payload: Any) -> bool:
    """Pure: whether a batch is against the published schema (422, nothing taken), rather than
    well-formed and refused item by item on rules no JSON schema can state — a reading's age,
    `since` after `observed_at`, the node — which is a 202 naming each refusal."""
    if not isinstance(payload, list) or len(payload) > MAX_BATCH:
        return True
    for item in payload:
        try:
            Signal.model_validate(item)
        except ValidationError as exc:
            if any(e["type"] != SINCE_AFTER_OBSERVED for e in exc.errors()):
                return True
    return False


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """Resolve `#/$defs/…` references: OpenAPI has no `$defs` beside a request body."""
    if isinstance(schema, dict):
        ref = schema.get("$ref", "")
        if ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _range(low: float, high: float, kind: str) -> dict[str, Any]:
    return {"anyOf": [{"type": kind, "minimum": low, "maximum": high}, {"type": "null"}]}


def _batch_schema() -> dict[str, Any]:
    """A batch as the handler takes it: the Signal schema with the code and value ranges its
    validator keeps (`bounds`), an XID's and a temperature's own by kind, which the model's
    fields cannot state; so a request the schema allows is one the push takes."""
    schema = TypeAdapter(list[Signal]).json_schema()
    schema["maxItems"] = MAX_BATCH
    item = schema["$defs"]["Signal"]
    item["properties"]["code"] = {**_range(*bounds.CODES, "integer"), "default": None}
    item["properties"]["value"] = {**_range(*bounds.VALUES, "number"), "default": None}
    by_kind = (
        (SignalKind.XID, "code", _range(*bounds.XID_CODES, "integer")),
        (SignalKind.THERMAL, "value", _range(*bounds.THERMAL_VALUES, "number")),
    )
    item["allOf"] = [
        {
            "if": {"properties": {"kind": {"const": kind.value}}, "required": ["kind"]},
            "then": {"properties": {name: bound}},
        }
        for kind, name, bound in by_kind
    ]
    return schema


def _body_doc(schema: dict[str, Any]) -> dict[str, Any]:
    """The request body for the OpenAPI document; the handlers validate it themselves so that
    a refused batch can name each bad item."""
    defs = schema.pop("$defs", {})
    content = {"application/json": {"schema": _inline(schema, defs)}}
    return {"requestBody": {"required": True, "content": content}}


class PushProblem(BaseModel):
    """One refused item, not to be sent again (it would be refused again)."""

    index: int | None = Field(
        default=None, description="the item's place in the batch; null: the whole body"
    )
    field: str = Field(
        description="what is wrong: a Signal field (`node`: no such node in the cluster; "
        "`gpu`: an index beyond the node's GPUs; `observed_at`: too old or in the future; …) "
        "or `body`"
    )
    reason: str


class PushAccepted(BaseModel):
    """What was taken; the rest is refused item by item, each with its reason."""

    accepted: int
    refused: list[PushProblem] = Field(
        default_factory=list, description="absent when every item was taken"
    )


class _Problems(BaseModel):
    """The API's error shape ({"reason", "detail"}), with each refused item in `detail`."""

    reason: str
    detail: list[PushProblem]
    accepted: int = 0


REFUSED: dict[int | str, dict[str, Any]] = {
    422: {"model": _Problems, "description": "refused: every problem named, nothing taken"},
    429: {
        "model": _Problems,
        "description": "a node sends faster than its limit: nothing taken, retry after "
        "`Retry-After` seconds",
    },
    503: {
        "description": "inbox full, or this replica does not lead: nothing stored, retry "
        "after `Retry-After` seconds"
    },
}


def _refused(problems: list[dict[str, Any]]) -> JSONResponse:
    return JSONResponse(
        {"reason": "refused: nothing taken", "detail": problems, "accepted": 0}, 422
    )


def _admit(
    admission: Admission, signals: Sequence[Signal]
) -> tuple[list[Signal], list[dict[str, Any]], float]:
    """Charge each node its signals (all of a node's, or none): (those taken, one problem per
    node refused, the longest wait). An agent's batch names its own node only, so a flooding
    agent gets 429 and keeps its queue; a mixed batch loses only the flooding node's items."""
    by_node: dict[str, int] = {}
    for signal in signals:
        by_node[signal.node] = by_node.get(signal.node, 0) + 1
    refused: dict[str, float] = {}
    for node, count in by_node.items():
        verdict = admission.signals(node, count)
        if verdict is not None:
            refused[node] = verdict[1]
    if not refused:
        return list(signals), [], 0.0
    rate = admission.limits.signals_per_node.rate
    problems = [
        {
            "index": None,
            "field": "node",
            "reason": f"{node} sends signals faster than {rate:g}/s: {by_node[node]} refused, "
            f"retry after {retry_after(wait)} s",
        }
        for node, wait in refused.items()
    ]
    kept = [s for s in signals if s.node not in refused]
    return kept, problems, max(refused.values())


async def _json_body(request: Request) -> tuple[Any, JSONResponse | None]:
    try:
        return await request.json(), None
    except ValueError as exc:
        reason = f"body is not valid JSON: {exc}"
        return None, _refused([{"field": "body", "reason": reason}])


def make_signals_router(
    inbox: SignalInbox,
    dependencies: Sequence[Depends] = (),
    *,
    mapping: AlertMapping | None = None,
    clock: Clock | None = None,
    max_age: timedelta = DEFAULT_MAX_AGE,
    event_max_age: timedelta = DEFAULT_EVENT_MAX_AGE,
    on_refused: Callable[[Sequence[dict[str, Any]]], None] | None = None,
    admission: Admission | None = None,
    nodes: NodeGpus | None = None,
) -> APIRouter:
    """The push endpoints; the web app mounts them under its auth `dependencies`. With an
    `admission`, each node's signals in a request are charged to that node's bucket; with
    `nodes`, a signal the cluster cannot have is refused at the door (and counted there)."""
    router = APIRouter(dependencies=list(dependencies), tags=["signals"])
    alert_mapping = mapping or AlertMapping()
    time_source = clock or SystemClock()

    def _store(signals: Sequence[Signal]) -> JSONResponse | None:
        try:
            inbox.put(signals)
        except InboxUnavailable as exc:
            return JSONResponse(
                {"reason": str(exc), "detail": None}, 503, headers={"Retry-After": "5"}
            )
        return None

    @router.post(
        "/api/v1/signals",
        status_code=202,
        response_model=PushAccepted,
        responses=REFUSED,
        openapi_extra=_body_doc(_batch_schema()),
    )
    async def push_signals(request: Request) -> JSONResponse:
        """Accept a JSON list of signals; each bad item is refused with its reason."""
        payload, error = await _json_body(request)
        if error is not None:
            return error
        taken, problems = _validate_items(payload, time_source.now(), max_age, event_max_age)
        if nodes is not None and taken:
            gpus = await run_in_threadpool(nodes, [s.node for _, s in taken])
            if gpus is not None:
                taken, refused = screen_at_door(taken, gpus)
                for problem, signal, refusal in refused:
                    problems.append(problem)
                    if admission is not None:
                        admission.count(Lane.SIGNALS, signal.node, refusal)
                problems.sort(key=lambda p: p["index"])
        signals = [signal for _, signal in taken]
        if problems and on_refused is not None:
            on_refused(problems)
        if problems and not signals and breaks_schema(payload):
            return _refused(problems)
        if admission is not None:
            signals, limited, wait = _admit(admission, signals)
            if limited and not signals:
                after = retry_after(wait)
                return JSONResponse(
                    {
                        "reason": "rate limited: nothing taken",
                        "detail": [*problems, *limited],
                        "accepted": 0,
                    },
                    429,
                    headers={"Retry-After": str(after)},
                )
            problems.extend(limited)
        unavailable = _store(signals)
        if unavailable is not None:
            return unavailable
        body: dict[str, Any] = {"accepted": len(signals)}
        if problems:
            body["refused"] = problems
        return JSONResponse(body, 202)

    @router.post(
        "/api/v1/alertmanager",
        responses=REFUSED,
        openapi_extra=_body_doc(Webhook.model_json_schema()),
    )
    async def alertmanager_webhook(request: Request) -> JSONResponse:
        """Alertmanager webhook receiver (payload version 4): firing alerts are decided on at
        once and held until resolved; each alert that cannot be a signal is named in `ignored`."""
        payload, error = await _json_body(request)
        if error is not None:
            return error
        try:
            webhook = parse_webhook(payload)
        except PayloadError as exc:
            detail = [{"field": "body", "reason": reason} for reason in exc.reasons]
            return _refused(detail)
        now = time_source.now()
        batch = map_webhook(webhook, alert_mapping, now)
        unavailable = _store(batch.signals)
        if unavailable is not None:
            return unavailable
        inbox.alerts.record(batch, now)
        return JSONResponse(
            {
                "accepted": len(batch.signals),
                "resolved": batch.resolved,
                "ignored": list(batch.ignored),
            },
            200,
        )

    return router
