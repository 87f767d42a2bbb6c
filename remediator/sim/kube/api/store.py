"""The simulated API server's storage: etcd's semantics, in memory.

Every object is a plain JSON-shaped dict. One cluster-wide, strictly increasing resourceVersion
stamps each write, as etcd's revision does; a write that names a stale resourceVersion is a 409
Conflict; watchers see ADDED/MODIFIED/DELETED in order and can resume from a resourceVersion the
store still remembers (older ones are 410 Gone, as on a real server).

Stored dicts are never mutated after they are stored: a write replaces the whole object. Readers
may therefore hold on to what `get`/`list` return without copying, but must not modify it; use
`mutate` (or copy first) to change an object.
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

HISTORY_LIMIT = 50_000


def clone(value: Any) -> Any:
    """Deep-copy a JSON-shaped value; several times faster than copy.deepcopy, which matters
    because every write copies and a 2,000-node fleet's kubelets write all the time."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error the API server reports as a `Status` object."""

    code = 500
    reason = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


class BadRequest(ApiError):
    code, reason = 400, "BadRequest"


class NotFound(ApiError):
    code, reason = 404, "NotFound"


class MethodNotAllowed(ApiError):
    code, reason = 405, "MethodNotAllowed"


class AlreadyExists(ApiError):
    code, reason = 409, "AlreadyExists"


class Conflict(ApiError):
    code, reason = 409, "Conflict"


class Gone(ApiError):
    code, reason = 410, "Expired"


class UnsupportedMediaType(ApiError):
    code, reason = 415, "UnsupportedMediaType"


class Invalid(ApiError):
    code, reason = 422, "Invalid"


class TooManyRequests(ApiError):
    code, reason = 429, "TooManyRequests"


class InternalError(ApiError):
    code, reason = 500, "InternalError"


def _details(resource: str, name: str) -> dict[str, Any]:
    group, _, plural = resource.rpartition("/")
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def not_found(resource: str, name: str) -> NotFound:
    plural = resource.rpartition("/")[2]
    group = resource.rpartition("/")[0]
    qualified = f"{plural}.{group}" if group else plural
    return NotFound(f'{qualified} "{name}" not found', details=_details(resource, name))


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    object: Obj
    resource_version: int


Key = tuple[str, str]  # (namespace or "", name)
Watcher = Callable[[WatchEvent], None]


class ObjectStore:
    """Objects by resource ("nodes", "pods", "apps/replicasets", "policy/poddisruptionbudgets",
    "coordination.k8s.io/leases", …), then by (namespace, name); namespace "" for cluster-scoped.

    Thread-safe; watcher callbacks run under the lock, in write order, and must only hand the
    event off (e.g. `loop.call_soon_threadsafe(queue.put_nowait, ev)`), never block or write back.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._history: deque[WatchEvent] = deque(maxlen=HISTORY_LIMIT)
        self._watchers: dict[int, tuple[str, Watcher]] = {}
        self._next_watcher = 0

    # -- reads -------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def get(self, resource: str, namespace: str, name: str) -> Obj:
        with self._lock:
            obj = self._objects.get(resource, {}).get((namespace, name))
            if obj is None:
                raise not_found(resource, name)
            return obj

    def find(self, resource: str, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get(resource, {}).get((namespace, name))

    def list(self, resource: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        """All objects of a resource (in one namespace, or all when None) and the list's RV."""
        with self._lock:
            bucket = self._objects.get(resource, {})
            if namespace is None:
                items = list(bucket.values())
            else:
                items = [o for (ns, _), o in bucket.items() if ns == namespace]
            return items, self._rv

    # -- writes ------------------------------------------------------------------------------

    def create(self, resource: str, obj: Obj, uid: str | None = None) -> Obj:
        """Add an object; `uid` when the server's defaulting already needed it (a Job's
        selector names its own uid)."""
        with self._lock:
            obj = clone(obj)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix:
                    raise Invalid("metadata.name: Required value: name or generateName is required")
                meta["name"] = prefix + uuid.uuid4().hex[:5]
            key = (meta.get("namespace", ""), meta["name"])
            bucket = self._objects.setdefault(resource, {})
            if key in bucket:
                plural = resource.rpartition("/")[2]
                raise AlreadyExists(
                    f'{plural} "{key[1]}" already exists', details=_details(resource, key[1])
                )
            meta["uid"] = uid or str(uuid.uuid4())
            meta.setdefault("creationTimestamp", now_rfc3339())
            meta.pop("resourceVersion", None)
            self._commit(resource, key, obj, "ADDED")
            return obj

    def update(self, resource: str, obj: Obj) -> Obj:
        """Replace an object; a non-empty metadata.resourceVersion must match (else 409)."""
        with self._lock:
            obj = clone(obj)
            meta = obj.setdefault("metadata", {})
            key = (meta.get("namespace", ""), meta.get("name", ""))
            current = self._objects.get(resource, {}).get(key)
            if current is None:
                raise not_found(resource, key[1])
            expected = meta.get("resourceVersion")
            if expected and expected != current["metadata"]["resourceVersion"]:
                raise self._conflict(resource, key[1])
            for field in ("uid", "creationTimestamp"):
                meta[field] = current["metadata"][field]
            if "deletionTimestamp" in current["metadata"]:
                meta["deletionTimestamp"] = current["metadata"]["deletionTimestamp"]
            return self._commit(resource, key, obj, "MODIFIED")

    def mutate(
        self,
        resource: str,
        namespace: str,
        name: str,
        change: Callable[[Obj], Obj | None],
        expect_rv: str | None = None,
    ) -> Obj:
        """Atomically read, change (a private deep copy: edit in place or return a new dict),
        and write back. A change that leaves the object as it was writes nothing."""
        with self._lock:
            current = self.get(resource, namespace, name)
            if expect_rv and expect_rv != current["metadata"]["resourceVersion"]:
                raise self._conflict(resource, name)
            draft = clone(current)
            result = change(draft)
            new = draft if result is None else result
            if new == current:
                return current
            new.setdefault("metadata", {})
            for field in ("name", "namespace", "uid", "creationTimestamp"):
                if field in current["metadata"]:
                    new["metadata"][field] = current["metadata"][field]
            return self._commit(resource, (namespace, name), new, "MODIFIED")

    def delete(self, resource: str, namespace: str, name: str) -> Obj:
        """Remove an object now (graceful pod deletion is the kubelet simulator's business)."""
        with self._lock:
            bucket = self._objects.get(resource, {})
            current = bucket.pop((namespace, name), None)
            if current is None:
                raise not_found(resource, name)
            self._rv += 1
            gone = clone(current)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._emit(WatchEvent("DELETED", resource, gone, self._rv))
            return gone

    def _conflict(self, resource: str, name: str) -> Conflict:
        plural = resource.rpartition("/")[2]
        return Conflict(
            f'Operation cannot be fulfilled on {plural} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            details=_details(resource, name),
        )

    def _commit(self, resource: str, key: Key, obj: Obj, event_type: str) -> Obj:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._objects.setdefault(resource, {})[key] = obj
        self._emit(WatchEvent(event_type, resource, obj, self._rv))
        return obj

    # -- watch -------------------------------------------------------------------------------

    def _emit(self, event: WatchEvent) -> None:
        self._history.append(event)
        for resource, callback in list(self._watchers.values()):
            if resource == event.resource:
                callback(event)

    def subscribe(self, resource: str, callback: Watcher, since: int | None = None) -> int:
        """Register a watcher; with `since`, first replay every event after that RV (410 Gone
        when the history no longer reaches back that far). Returns a handle for unsubscribe."""
        with self._lock:
            if since is not None and since < self._rv:
                oldest = self._history[0].resource_version if self._history else self._rv + 1
                if since + 1 < oldest:
                    raise Gone(f"too old resource version: {since} ({oldest - 1})")
                for event in self._history:
                    if event.resource_version > since and event.resource == resource:
                        callback(event)
            self._next_watcher += 1
            self._watchers[self._next_watcher] = (resource, callback)
            return self._next_watcher

    def unsubscribe(self, handle: int) -> None:
        with self._lock:
            self._watchers.pop(handle, None)

    def resources(self) -> Iterable[str]:
        with self._lock:
            return list(self._objects)
