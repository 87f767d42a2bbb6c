"""The cluster's nodes from one LIST and a watch, instead of a LIST per poll.

An informer in the client-go sense, for nodes only: list once, then watch from the list's
resourceVersion and apply each ADDED / MODIFIED / DELETED to a local cache; bookmarks move the
version on. A watch the server ends (its timeout) is reopened from the last version; a 410 Gone
(the version fell out of the server's history) means a fresh LIST. With kubelets heartbeating
through Leases, nodes change only when their status does, so a healthy fleet costs nothing.

Listeners hear which node changed (and when a fresh LIST may have hidden changes), so the
controller's event-driven waits share this one node watch instead of opening their own.

A cache that cannot reach the server keeps its content for `max_blind_seconds` and then refuses
to answer (TransientError with the reason): the node-condition source must say "I cannot see"
rather than serve a cluster that stopped changing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from remediator.errors import RemediatorError, TransientError
from remediator.kube.client import ResourceExpired
from remediator.kube.objects import Node

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class EventStream(Protocol):
    """One open watch (KubeClient's WatchStream)."""

    def events(self) -> Iterator[JSON]: ...

    def close(self) -> None: ...


class NodeWatchApi(Protocol):
    """What the informer needs of KubeClient."""

    def list_nodes(self, label_selector: str | None = None) -> list[Node]: ...

    def list_nodes_versioned(self) -> tuple[list[Node], str]: ...

    def watch_nodes(self, resource_version: str, timeout_seconds: int = 300) -> EventStream: ...


class NodeInformer:
    def __init__(
        self,
        kube: NodeWatchApi,
        *,
        watch_seconds: int = 300,
        max_blind_seconds: float = 60.0,
        first_sync_seconds: float = 30.0,
        backoff: tuple[float, float] = (0.5, 30.0),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._watch_seconds = watch_seconds
        self._max_blind = max_blind_seconds
        self._first_sync = first_sync_seconds
        self._backoff = backoff
        self._monotonic = monotonic
        self._nodes: dict[str, Node] = {}
        self._version = ""
        self._synced = threading.Event()
        self._failing_since: float | None = None
        self._error: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: EventStream | None = None
        self._thread: threading.Thread | None = None
        self._started_at = 0.0
        self._listeners: list[tuple[Callable[[str], None], Callable[[], None]]] = []
        self.lists = 0  # LISTs done, the first one included (for tests and the bench)

    # -- reading the cache -------------------------------------------------------------------

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        """The cached nodes; a label selector is not cached and goes to the server."""
        if label_selector:
            return self._kube.list_nodes(label_selector)
        if self._thread is None:
            self.start()
        if not self._synced.is_set():  # a reader before the first LIST ended waits for it
            self._synced.wait(max(0.0, self._started_at + self._first_sync - self._monotonic()))
        with self._lock:
            if not self._synced.is_set():
                raise TransientError(f"node cache not synced yet: {self._error or 'listing'}")
            since = self._failing_since
            if since is not None and self._monotonic() - since > self._max_blind:
                raise TransientError(
                    f"node watch failing for {self._monotonic() - since:.0f}s: {self._error}"
                )
            return list(self._nodes.values())

    def knows(self, name: str) -> bool | None:
        """Whether the cluster has this node, from the cache without waiting; None before the
        first LIST ended (nobody can say yet)."""
        if not self._synced.is_set():
            return None
        with self._lock:
            return name in self._nodes

    def gpus_of(self, names: Iterable[str]) -> dict[str, int | None] | None:
        """Each of `names` the cluster has → its GPU capacity (None: not said), from the cache
        without waiting; None before the first LIST ended."""
        if not self._synced.is_set():
            return None
        with self._lock:
            return {n: node.gpus for n in names if (node := self._nodes.get(n)) is not None}

    def subscribe(self, on_change: Callable[[str], None], on_resync: Callable[[], None]) -> None:
        """`on_change(name)` after each node event is applied; `on_resync()` after each LIST."""
        self._listeners.append((on_change, on_resync))

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str:
        return self._version

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._started_at = self._monotonic()
            self._thread = threading.Thread(target=self._run, name="node-informer", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # -- the loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                if not self._version:
                    self._relist()
                self._watch_once()
                delay = self._backoff[0]
            except ResourceExpired as exc:
                log.info("node watch expired, listing again: %s", exc)
                self._version = ""
            except RemediatorError as exc:
                self._failed(str(exc))
                self._stop.wait(delay)
                delay = min(delay * 2, self._backoff[1])
            except Exception as exc:  # a bug must not silently freeze the cache: keep trying
                log.exception("node watch failed unexpectedly")
                self._failed(f"{type(exc).__name__}: {exc}")
                self._stop.wait(delay)
                delay = min(delay * 2, self._backoff[1])

    def _relist(self) -> None:
        nodes, version = self._kube.list_nodes_versioned()
        with self._lock:
            self._nodes = {n.name: n for n in nodes if n.name}
            self._version = version
            self._failing_since, self._error = None, None
            self.lists += 1
        self._synced.set()
        for _, on_resync in self._listeners:
            on_resync()

    def _watch_once(self) -> None:
        stream = self._kube.watch_nodes(self._version, self._watch_seconds)
        self._stream = stream
        with self._lock:
            self._failing_since, self._error = None, None
        try:
            for event in stream.events():
                if self._stop.is_set():
                    return
                self._apply(event)
        finally:
            self._stream = None

    def _apply(self, event: JSON) -> None:
        kind = event.get("type")
        raw = event.get("object") or {}
        meta = raw.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        name = str(meta.get("name") or "")
        with self._lock:
            if kind in ("ADDED", "MODIFIED"):
                node = Node.from_json(raw)
                if node.name:
                    self._nodes[node.name] = node
            elif kind == "DELETED":
                self._nodes.pop(name, None)
            if version:
                self._version = version
        if name and kind in ("ADDED", "MODIFIED", "DELETED"):
            for on_change, _ in self._listeners:
                on_change(name)

    def _failed(self, error: str) -> None:
        with self._lock:
            if self._failing_since is None:
                self._failing_since = self._monotonic()
            self._error = error
        log.warning("node watch: %s", error)
