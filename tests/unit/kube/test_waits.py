"""The watch loop behind event-driven waits: events name their node, a 410 Gone or a broken
stream means a fresh start and a resync, and the stream's lines are read across chunks."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from remediator.errors import TransientError
from remediator.kube.client import ResourceExpired, _watch_events
from remediator.kube.waits import NODES, PODS, NodeActivity


def lines(*events: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def test_events_are_read_across_chunk_boundaries() -> None:
    body = lines({"type": "ADDED", "object": {"metadata": {"name": "a"}}}, {"type": "BOOKMARK"})
    chunks = [body[:7], body[7:30], body[30:]]
    events = list(_watch_events(iter(chunks), "watch pods"))
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]


def test_a_410_error_event_is_resource_expired_and_others_are_transient() -> None:
    gone = lines({"type": "ERROR", "object": {"code": 410, "message": "too old"}})
    with pytest.raises(ResourceExpired, match="too old"):
        list(_watch_events(iter([gone]), "watch pods"))
    broken = lines({"type": "ERROR", "object": {"code": 500, "message": "boom"}})
    with pytest.raises(TransientError, match="boom"):
        list(_watch_events(iter([broken]), "watch pods"))


class ScriptedKube:
    """Stands in for the API server's watch: the pods watch first answers 410 Gone, then
    streams one event; the nodes watch streams one event; then both stay quiet."""

    def __init__(self) -> None:
        self.versions: list[str] = []
        self.quiet = threading.Event()
        self._pod_watches = 0

    def current_version(self, path: str) -> str:
        self.versions.append(path)
        return "100"

    def watch(self, path: str, resource_version: str, timeout_seconds: int) -> Iterator[Any]:
        if path == PODS:
            self._pod_watches += 1
            if self._pod_watches == 1:
                raise ResourceExpired("watch pods: 410 Gone")
            yield {
                "type": "MODIFIED",
                "object": {"metadata": {"resourceVersion": "101"}, "spec": {"nodeName": "gpu-1"}},
            }
        elif path == NODES:
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "102"}}}
            yield {"type": "MODIFIED", "object": {"metadata": {"name": "gpu-2"}}}
        self.quiet.wait()


def test_changes_name_their_node_and_a_410_lists_again_with_a_resync() -> None:
    kube = ScriptedKube()
    seen: set[str] = set()
    both = threading.Event()
    resyncs: list[int] = []

    def changed(node: str) -> None:
        seen.add(node)
        if seen == {"gpu-1", "gpu-2"}:
            both.set()

    activity = NodeActivity(kube, changed, lambda: resyncs.append(1))  # type: ignore[arg-type]
    activity.start()
    try:
        assert both.wait(10)
    finally:
        activity.stop()
        kube.quiet.set()
    # Pods: listed, 410, listed again; nodes: listed once. Each listing is a resync.
    assert sorted(kube.versions) == [NODES, PODS, PODS]
    assert len(resyncs) == 3
