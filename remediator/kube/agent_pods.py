"""The node agents' DaemonSet pods, as the kubelets report them: one LIST, then a watch.

Liveness at fleet scale comes from here (model/agent_liveness.py), not from heartbeats: the
kubelet reports each agent pod's readiness, restarts and back-off, and a label-selected watch
hears of a change within a second whatever the fleet's size, for one stream per replica and no
request per agent. Every replica keeps its own (each answers the console and the API), as it
keeps its node informer; the leader's all-pods watch (kube/waits.py) carries only node names.

A pod deleted with no other on its node leaves a `PodGone` (kept while this replica runs): the
DaemonSet no longer runs there. A watch that cannot reach the server keeps the view for
`max_blind_seconds`; past that `watching()` is False and liveness falls back to heartbeats.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from remediator.clock import Clock
from remediator.errors import RemediatorError
from remediator.kube.client import ResourceExpired
from remediator.model.agent_liveness import AgentPod, Judge, PodGone, PodSight

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class EventStream(Protocol):
    def events(self) -> Iterator[JSON]: ...

    def close(self) -> None: ...


class PodWatchApi(Protocol):
    """What this needs of KubeClient."""

    def list_pods_versioned(
        self, label_selector: str, convert: Callable[[JSON], Listed | None]
    ) -> tuple[list[Listed], str]: ...

    def watch_pods(
        self, resource_version: str, label_selector: str, timeout_seconds: int = 300
    ) -> EventStream: ...


# A listed agent pod: (namespace/name, node, pod).
Listed = tuple[str, str, AgentPod]


def _listed(raw: JSON) -> Listed | None:
    meta = raw.get("metadata") or {}
    found = agent_pod(raw)
    if found is None:
        return None
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}", found[0], found[1]


def agent_pod(raw: Mapping[str, Any]) -> tuple[str, AgentPod] | None:
    """(node, pod) from a pod object; None for a pod not bound to a node yet."""
    meta = raw.get("metadata") or {}
    node = str((raw.get("spec") or {}).get("nodeName") or "")
    if not node:
        return None
    status = raw.get("status") or {}
    ready = (
        next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None) or {}
    )
    containers = status.get("containerStatuses") or []
    waiting = next(
        (
            str(reason)
            for c in containers
            if (reason := ((c.get("state") or {}).get("waiting") or {}).get("reason"))
        ),
        "",
    )
    exits = [
        ended for c in containers if (ended := (c.get("lastState") or {}).get("terminated") or {})
    ]
    last_exit = (
        f"{exits[0].get('reason') or 'terminated'}, exit {exits[0].get('exitCode')}"
        if exits
        else ""
    )
    since = ready.get("lastTransitionTime") or meta.get("creationTimestamp")
    pod = AgentPod(
        name=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
        ready=ready.get("status") == "True",
        since=_time(since),
        restarts=max((int(c.get("restartCount") or 0) for c in containers), default=0),
        waiting=waiting,
        last_exit=last_exit,
        terminating=bool(meta.get("deletionTimestamp")),
    )
    return node, pod


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class AgentPods:
    """Thread-safe: the watch thread writes, readers (web handlers, the scrape) read."""

    def __init__(
        self,
        kube: PodWatchApi,
        selector: str,
        clock: Clock,
        *,
        watch_seconds: int = 300,
        max_blind_seconds: float = 60.0,
        backoff: tuple[float, float] = (0.5, 30.0),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._selector = selector
        self._clock = clock
        self._watch_seconds = watch_seconds
        self._max_blind = max_blind_seconds
        self._backoff = backoff
        self._monotonic = monotonic
        self._pods: dict[str, tuple[str, AgentPod]] = {}  # namespace/name → (node, pod)
        self._gone: dict[str, PodGone] = {}  # node → the agent pod it lost
        self._sights: Mapping[str, PodSight] | None = None  # built from the two, until a change
        self._version = ""
        self._synced = threading.Event()
        self._failing_since: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: EventStream | None = None
        self._thread: threading.Thread | None = None
        self.lists = 0  # LISTs done (for tests and the bench)
        self.events = 0  # watch events applied

    # -- reading -----------------------------------------------------------------------------

    def watching(self) -> bool:
        """Whether the view can be trusted: listed, not blind for long, and agents run as pods
        here (a cluster with none runs them some other way: heartbeats alone judge)."""
        if not self._synced.is_set():
            return False
        with self._lock:
            since = self._failing_since
            if since is not None and self._monotonic() - since > self._max_blind:
                return False
            return bool(self._pods or self._gone)

    def sights(self) -> Mapping[str, PodSight]:
        """Node → its agent pod (a live one before a terminating one), or the pod it lost.
        Built again only after a change (every request and scrape reads it; agent pods change
        rarely), and never changed once handed out."""
        with self._lock:
            if self._sights is not None:
                return self._sights
            found: dict[str, PodSight] = dict(self._gone)
            for node, pod in self._pods.values():
                current = found.get(node)
                if not isinstance(current, AgentPod) or (current.terminating > pod.terminating):
                    found[node] = pod
            self._sights = found
            return found

    def sight(self, node: str) -> PodSight:
        return self.sights().get(node)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="agent-pods", daemon=True)
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
                log.info("agent pod watch expired, listing again: %s", exc)
                self._version = ""
            except Exception as exc:  # a bug must not silently freeze the view: keep trying
                if not isinstance(exc, RemediatorError):
                    log.exception("agent pod watch failed unexpectedly")
                self._failed(f"{type(exc).__name__}: {exc}")
                self._stop.wait(delay)
                delay = min(delay * 2, self._backoff[1])

    def _relist(self) -> None:
        items, version = self._kube.list_pods_versioned(self._selector, _listed)
        now = self._clock.now()
        listed = {key: (node, pod) for key, node, pod in items}
        with self._lock:
            lost = {node: PodGone(pod.name, now) for key, (node, pod) in self._pods.items()}
            self._pods = listed
            for node, gone in lost.items():
                self._gone.setdefault(node, gone)
            for node, _pod in listed.values():
                self._gone.pop(node, None)
            self._version = version
            self._failing_since = None
            self._sights = None
            self.lists += 1
        self._synced.set()

    def _watch_once(self) -> None:
        stream = self._kube.watch_pods(self._version, self._selector, self._watch_seconds)
        self._stream = stream
        with self._lock:
            self._failing_since = None
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
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        with self._lock:
            version = meta.get("resourceVersion")
            if version:
                self._version = str(version)
            if kind in ("ADDED", "MODIFIED"):
                found = agent_pod(raw)
                if found is not None:
                    self._pods[key] = found
                    self._gone.pop(found[0], None)
            elif kind == "DELETED":
                dropped = self._pods.pop(key, None)
                if dropped is not None:
                    node, pod = dropped
                    if all(other != node for other, _ in self._pods.values()):
                        self._gone[node] = PodGone(pod.name, self._clock.now())
            else:
                return
            self._sights = None
            self.events += 1

    def _failed(self, error: str) -> None:
        with self._lock:
            if self._failing_since is None:
                self._failing_since = self._monotonic()
        log.warning("agent pod watch: %s", error)


def liveness_judge(
    pods: AgentPods | None, now: datetime, *, silent_after: timedelta, not_ready_after: timedelta
) -> Judge:
    """One reading's judge over this replica's pod view (None: heartbeats alone)."""
    return Judge(
        now=now,
        silent_after=silent_after,
        not_ready_after=not_ready_after,
        sights=pods.sights() if pods is not None else {},
        watching=pods is not None and pods.watching(),
    )
