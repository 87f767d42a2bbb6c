"""The node informer's bookkeeping against a scripted API: events applied, a 410 answered with
a fresh LIST, a watch that keeps failing turns into an error instead of a frozen cluster.
(The real watch against the simulator: tests/integration/test_controller_poll.py.)"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest

from remediator.errors import TransientError
from remediator.kube.client import ResourceExpired
from remediator.kube.informer import NodeInformer
from remediator.kube.objects import Node

JSON = dict[str, Any]


def raw(name: str, rv: int, cordoned: bool = False) -> JSON:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "spec": {"unschedulable": cordoned},
    }


class Stream:
    def __init__(self, events: list[JSON]) -> None:
        self._events = events

    def events(self) -> Iterator[JSON]:
        yield from self._events

    def close(self) -> None:
        return


class ScriptedApi:
    """LIST answers with `listed`; each watch takes the next scripted step (a stream of
    events, or an exception), and blocks when the script is exhausted."""

    def __init__(self, listed: list[list[JSON]]) -> None:
        self.listed = listed
        self.lists = 0
        self.watched_from: list[str] = []
        self.script: queue.Queue[Stream | Exception] = queue.Queue()
        self.closed = False

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        raise AssertionError("the informer must not LIST through list_nodes")

    def list_nodes_versioned(self) -> tuple[list[Node], str]:
        items = self.listed[min(self.lists, len(self.listed) - 1)]
        self.lists += 1
        version = max(int(i["metadata"]["resourceVersion"]) for i in items)
        return [Node.from_json(i) for i in items], str(version)

    def watch_nodes(self, resource_version: str, timeout_seconds: int = 300) -> Stream:
        self.watched_from.append(resource_version)
        while True:
            if self.closed:
                raise TransientError("the test is over")
            try:
                step = self.script.get(timeout=0.02)
                break
            except queue.Empty:
                continue
        if isinstance(step, Exception):
            raise step
        return step


def wait_watches(api: ScriptedApi, count: int) -> None:
    """Until the informer has opened `count` watches: every step before the last is done."""
    deadline = time.monotonic() + 10
    while len(api.watched_from) < count:
        assert time.monotonic() < deadline, api.watched_from
        time.sleep(0.005)


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    scripted = ScriptedApi([[raw("a", 5), raw("b", 6)], [raw("a", 40), raw("c", 41)]])
    yield scripted
    scripted.closed = True


def test_events_update_the_cache_and_a_410_means_a_fresh_list(api: ScriptedApi) -> None:
    informer = NodeInformer(api, backoff=(0.01, 0.01))
    try:
        assert sorted(n.name for n in informer.list_nodes()) == ["a", "b"]
        api.script.put(
            Stream(
                [
                    {"type": "MODIFIED", "object": raw("a", 7, cordoned=True)},
                    {"type": "ADDED", "object": raw("d", 8)},
                    {"type": "DELETED", "object": raw("b", 9)},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                ]
            )
        )
        wait_watches(api, 2)
        nodes = {n.name: n for n in informer.list_nodes()}
        assert sorted(nodes) == ["a", "d"] and nodes["a"].unschedulable
        assert api.watched_from[:2] == ["6", "12"]  # reopened from the bookmark's version
        assert api.lists == 1

        api.script.put(ResourceExpired("watch nodes: 410 too old resource version"))
        wait_watches(api, 3)
        assert api.lists == 2
        assert sorted(n.name for n in informer.list_nodes()) == ["a", "c"]
        assert api.watched_from[-1] == "41"
    finally:
        api.closed = True
        informer.stop()


def test_listeners_hear_each_changed_node_and_each_fresh_list(api: ScriptedApi) -> None:
    informer = NodeInformer(api, backoff=(0.01, 0.01))
    changed: list[str] = []
    resyncs: list[int] = []
    informer.subscribe(changed.append, lambda: resyncs.append(api.lists))
    try:
        informer.list_nodes()
        assert resyncs == [1]
        api.script.put(
            Stream(
                [
                    {"type": "MODIFIED", "object": raw("a", 7, cordoned=True)},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}},
                    {"type": "DELETED", "object": raw("b", 9)},
                ]
            )
        )
        api.script.put(ResourceExpired("watch nodes: 410 too old resource version"))
        wait_watches(api, 3)
        assert changed == ["a", "b"]  # a bookmark changes no node
        assert resyncs == [1, 2]  # the LIST after the 410 may have hidden changes
    finally:
        api.closed = True
        informer.stop()


def test_a_watch_failing_too_long_is_an_error_not_a_frozen_cluster(api: ScriptedApi) -> None:
    clock = [0.0]
    informer = NodeInformer(
        api, max_blind_seconds=60, backoff=(0.01, 0.01), monotonic=lambda: clock[0]
    )
    try:
        assert len(informer.list_nodes()) == 2
        for _ in range(3):
            api.script.put(TransientError("watch nodes: ConnectionRefusedError"))
        wait_watches(api, 4)
        clock[0] = 30.0
        assert len(informer.list_nodes()) == 2  # blind for a while: the cache still answers
        clock[0] = 90.0
        with pytest.raises(TransientError, match="node watch failing for 90s"):
            informer.list_nodes()
        api.script.put(Stream([]))  # the watch is back
        wait_watches(api, 5)
        assert len(informer.list_nodes()) == 2
    finally:
        api.closed = True
        informer.stop()


def test_knows_a_node_from_the_cache_and_cannot_say_before_the_first_list(
    api: ScriptedApi,
) -> None:
    """The heartbeat intake asks this per request: never a request to the API server."""
    informer = NodeInformer(api, backoff=(0.01, 0.01))
    try:
        assert informer.knows("a") is None  # not started: nobody can say yet
        informer.start()
        assert informer.wait_synced(10)
        assert (informer.knows("a"), informer.knows("zz")) == (True, False)
        assert api.lists == 1
    finally:
        api.closed = True
        informer.stop()
