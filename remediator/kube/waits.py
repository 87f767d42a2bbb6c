"""Waits that end when the thing happens: watches on pods and nodes that say which node just
changed, so a remediation waiting on that node is looked at at once instead of on its next poll.

One thread per collection: find the collection's current resourceVersion, watch from it, pass
each event's node name on, and carry on from the last version seen when the server closes the
stream. A 410 Gone (the version is older than the server keeps) or a broken stream means events
may have been missed: start again from a fresh version and report a resync, so that every waiter
looks once. Nothing here decides anything; the callbacks do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remediator.errors import RemediatorError
from remediator.kube.client import KubeClient, ResourceExpired

log = logging.getLogger(__name__)

PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
WATCH_SECONDS = 300
RETRY_SECONDS = 1.0


def node_of_pod(obj: Mapping[str, Any]) -> str | None:
    name = (obj.get("spec") or {}).get("nodeName")
    return str(name) if name else None


def name_of_node(obj: Mapping[str, Any]) -> str | None:
    name = (obj.get("metadata") or {}).get("name")
    return str(name) if name else None


@dataclass(frozen=True)
class _Collection:
    path: str
    node: Callable[[Mapping[str, Any]], str | None]


COLLECTIONS = (_Collection(PODS, node_of_pod), _Collection(NODES, name_of_node))


class NodeActivity:
    """Calls `on_change(node)` when a pod on that node or the node itself changes, and
    `on_resync()` when events may have been missed (a 410 Gone, a broken stream). With
    `watch_nodes=False` it watches pods only: the caller hears of nodes from its node informer."""

    def __init__(
        self,
        kube: KubeClient,
        on_change: Callable[[str], None],
        on_resync: Callable[[], None],
        *,
        watch_seconds: int = WATCH_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        watch_nodes: bool = True,
    ) -> None:
        self._kube = kube
        self._collections = COLLECTIONS if watch_nodes else COLLECTIONS[:1]
        self._on_change = on_change
        self._on_resync = on_resync
        self._watch_seconds = watch_seconds
        self._retry = retry_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.resyncs = 0

    def start(self) -> None:
        # A fresh flag per start: threads of an earlier start, still blocked in their stream,
        # stay stopped.
        self._stop = threading.Event()
        for collection in self._collections:
            thread = threading.Thread(
                target=self._run,
                args=(collection, self._stop),
                name=f"watch {collection.path}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop handing events on at once; the threads end with their current stream."""
        self._stop.set()
        self._threads.clear()

    def _run(self, collection: _Collection, stop: threading.Event) -> None:
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    version = self._kube.current_version(collection.path)
                    self._resync(stop)
                version = self._follow(collection, version, stop)
            except ResourceExpired as exc:
                log.info("%s: %s; listing again", collection.path, exc)
                version = None
            except RemediatorError as exc:
                log.warning("%s: %s; watching again in %.0fs", collection.path, exc, self._retry)
                version = None
                stop.wait(self._retry)

    def _follow(self, collection: _Collection, version: str, stop: threading.Event) -> str:
        """Stream until the server ends it; the last version seen, to carry on from."""
        for event in self._kube.watch(collection.path, version, self._watch_seconds):
            if stop.is_set():
                break
            obj = event.get("object") or {}
            seen = (obj.get("metadata") or {}).get("resourceVersion")
            if seen:
                version = str(seen)
            if event.get("type") == "BOOKMARK":
                continue
            node = collection.node(obj)
            if node is not None:
                self._on_change(node)
        return version

    def _resync(self, stop: threading.Event) -> None:
        self.resyncs += 1
        if not stop.is_set():
            self._on_resync()
