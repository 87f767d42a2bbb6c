"""`limit`/`continue` list chunking with the consistency a real server gives: every page of one
chunked list comes from the same snapshot (as etcd serves pages at the first page's revision),
and a token the server no longer remembers is 410 Expired, which clients answer by relisting.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from remediator.sim.kube.api.store import BadRequest, Gone, Obj

SNAPSHOT_TTL = 300.0
SNAPSHOT_LIMIT = 64


@dataclass(frozen=True)
class Page:
    items: list[Obj]
    resource_version: int
    continue_token: str
    remaining: int


class Snapshots:
    """The snapshots behind outstanding continue tokens, oldest evicted first."""

    def __init__(self, ttl: float = SNAPSHOT_TTL, limit: int = SNAPSHOT_LIMIT) -> None:
        self._ttl = ttl
        self._limit = limit
        self._lock = threading.Lock()
        self._taken: OrderedDict[str, tuple[float, list[Obj], int]] = OrderedDict()

    def first_page(self, items: list[Obj], resource_version: int, limit: int) -> Page:
        if limit <= 0 or len(items) <= limit:
            return Page(items, resource_version, "", 0)
        snap_id = uuid.uuid4().hex
        with self._lock:
            self._expire()
            self._taken[snap_id] = (time.monotonic(), list(items), resource_version)
            while len(self._taken) > self._limit:
                self._taken.popitem(last=False)
        return self._page(snap_id, items, resource_version, 0, limit)

    def next_page(self, token: str, limit: int) -> Page:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            snap_id, offset, rv = decoded["id"], int(decoded["start"]), int(decoded["rv"])
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise BadRequest(f"continue key is not valid: {exc}") from exc
        with self._lock:
            self._expire()
            taken = self._taken.get(snap_id)
        if taken is None:
            raise Gone(
                f"The provided continue parameter is too old to display a consistent list result. "
                f"You can start a new list without the continue parameter. (rv {rv})"
            )
        _, items, resource_version = taken
        return self._page(snap_id, items, resource_version, offset, limit)

    def _page(self, snap_id: str, items: list[Obj], rv: int, offset: int, limit: int) -> Page:
        end = len(items) if limit <= 0 else offset + limit
        chunk = items[offset:end]
        if end >= len(items):
            with self._lock:
                self._taken.pop(snap_id, None)
            return Page(chunk, rv, "", 0)
        token = {"v": "meta.k8s.io/v1", "rv": rv, "start": end, "id": snap_id}
        encoded = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
        return Page(chunk, rv, encoded, len(items) - end)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self._ttl
        while self._taken:
            first = next(iter(self._taken.values()))
            if first[0] >= cutoff:
                break
            self._taken.popitem(last=False)
