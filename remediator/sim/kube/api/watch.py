"""Watch streams: newline-delimited `{"type", "object"}` events over one chunked response, as the
API server sends them. Selectors apply to transitions the way the watch cache applies them: an
object that starts matching arrives as ADDED and one that stops matching as DELETED.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from remediator.sim.kube.api.selectors import FieldSelector, LabelSelector
from remediator.sim.kube.api.store import ApiError, BadRequest, Key, Obj, ObjectStore, WatchEvent

DEFAULT_TIMEOUT = 1800.0
BOOKMARK_INTERVAL = 10.0


@dataclass(frozen=True)
class WatchRequest:
    resource: str
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    resource_version: str  # "" / "0" = current state first, as synthetic ADDED events
    timeout: float
    bookmarks: bool
    send_initial_events: bool
    kind: str
    api_version: str


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata", {})
    return meta.get("namespace", ""), meta.get("name", "")


class WatchStream:
    """One watch: subscribed at construction (so nothing written afterwards is missed), streamed
    by iterating `lines()`. `render(obj, first)` turns an event's object into what is sent
    (plain object, or a one-row Table when kubectl asked for one)."""

    def __init__(
        self,
        store: ObjectStore,
        req: WatchRequest,
        render: Callable[[Obj, bool], Obj],
    ) -> None:
        self._store = store
        self._req = req
        self._render = render
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self._matching: set[Key] = set()
        self._initial: list[Obj] = []
        self._gone: ApiError | None = None
        self._handle: int | None = None
        items, rv = store.list(req.resource, req.namespace)
        for obj in items:
            if self._selected(obj):
                self._matching.add(_key(obj))
                self._initial.append(obj)
        self._initial.sort(key=_key)
        self._start_rv = rv
        since: int = rv
        replay_initial = req.resource_version in ("", "0") or req.send_initial_events
        if not replay_initial:
            try:
                since = int(req.resource_version)
            except ValueError:
                since = -1
            self._initial = []
        if since < 0:
            self._gone = BadRequest(f"invalid resource version: {req.resource_version!r}")
            return
        try:
            self._handle = store.subscribe(req.resource, self._deliver, since=since)
        except ApiError as exc:
            self._gone = exc

    def _deliver(self, event: WatchEvent) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:
            return  # the server's loop is gone; the stream is over anyway

    def _selected(self, obj: Obj) -> bool:
        meta = obj.get("metadata", {})
        if self._req.namespace is not None and meta.get("namespace", "") != self._req.namespace:
            return False
        return self._req.labels.matches(meta.get("labels")) and self._req.fields.matches(obj)

    def _translate(self, event: WatchEvent) -> str | None:
        key = _key(event.object)
        if self._req.namespace is not None and key[0] != self._req.namespace:
            return None
        was = key in self._matching
        now = event.type != "DELETED" and self._selected(event.object)
        if now:
            self._matching.add(key)
            return "MODIFIED" if was and event.type == "MODIFIED" else "ADDED"
        self._matching.discard(key)
        return "DELETED" if was else None

    def _line(self, event_type: str, obj: Obj, first: bool) -> bytes:
        body = {"type": event_type, "object": self._render(obj, first)}
        return json.dumps(body, separators=(",", ":")).encode() + b"\n"

    def _bookmark(self, rv: int, initial_end: bool) -> bytes:
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": self._req.kind, "apiVersion": self._req.api_version, "metadata": meta}
        return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + (
            b"\n"
        )

    async def lines(self) -> AsyncIterator[bytes]:
        try:
            if self._gone is not None:
                status = self._gone.status()
                yield json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
                return
            first = True
            for obj in self._initial:
                yield self._line("ADDED", obj, first)
                first = False
            last_rv = self._start_rv
            if self._req.send_initial_events and self._req.bookmarks:
                yield self._bookmark(last_rv, initial_end=True)
            deadline = self._loop.time() + self._req.timeout
            next_bookmark = self._loop.time() + BOOKMARK_INTERVAL
            while True:
                now = self._loop.time()
                if now >= deadline:
                    return
                if self._req.bookmarks and now >= next_bookmark:
                    yield self._bookmark(last_rv, initial_end=False)
                    next_bookmark = now + BOOKMARK_INTERVAL
                wake = min(deadline, next_bookmark) if self._req.bookmarks else deadline
                try:
                    event = await asyncio.wait_for(self._queue.get(), max(wake - now, 0.0))
                except TimeoutError:
                    continue
                last_rv = max(last_rv, event.resource_version)
                event_type = self._translate(event)
                if event_type is not None:
                    yield self._line(event_type, event.object, first)
                    first = False
        finally:
            self.close()

    def close(self) -> None:
        if self._handle is not None:
            self._store.unsubscribe(self._handle)
            self._handle = None
