"""Watch streams over a real ObjectStore: initial state, selector transitions, 410 Gone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from remediator.sim.kube.api import store as store_module
from remediator.sim.kube.api.selectors import parse_field_selector, parse_label_selector
from remediator.sim.kube.api.store import Obj, ObjectStore
from remediator.sim.kube.api.watch import WatchRequest, WatchStream


def request(rv: str = "", labels: str = "", timeout: float = 0.3) -> WatchRequest:
    return WatchRequest(
        resource="nodes",
        namespace=None,
        labels=parse_label_selector(labels),
        fields=parse_field_selector("", "nodes"),
        resource_version=rv,
        timeout=timeout,
        bookmarks=True,
        send_initial_events=False,
        kind="Node",
        api_version="v1",
    )


def node(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": labels}}


def merge_metadata(patch: Obj) -> Callable[[Obj], Obj]:
    def change(current: Obj) -> Obj:
        return {**current, "metadata": {**current["metadata"], **patch["metadata"]}}

    return change


def collect(store: ObjectStore, req: WatchRequest, writes: list[tuple[str, Obj]]) -> list[Obj]:
    async def run() -> list[Obj]:
        stream = WatchStream(store, req, lambda o, first: o)
        for op, obj in writes:
            if op == "create":
                store.create("nodes", obj)
            elif op == "update":
                store.mutate("nodes", "", obj["metadata"]["name"], merge_metadata(obj))
            else:
                store.delete("nodes", "", obj["metadata"]["name"])
        return [json.loads(line) async for line in stream.lines()]

    return asyncio.run(run())


def test_initial_state_then_changes() -> None:
    store = ObjectStore()
    store.create("nodes", node("a"))
    events = collect(store, request(), [("create", node("b")), ("delete", node("a"))])
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]


def test_from_resource_version_skips_initial_state() -> None:
    store = ObjectStore()
    store.create("nodes", node("a"))
    rv = str(store.resource_version)
    events = collect(store, request(rv), [("create", node("b"))])
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]


def test_selector_transitions_become_added_and_deleted() -> None:
    store = ObjectStore()
    store.create("nodes", node("a", pool="x"))
    rv = str(store.resource_version)
    writes = [
        ("update", node("a", pool="y")),
        ("update", node("a", pool="x")),
        ("update", {"metadata": {"name": "a", "annotations": {"k": "v"}}}),
    ]
    events = collect(store, request(rv, labels="pool=x"), writes)
    assert [e["type"] for e in events] == ["DELETED", "ADDED", "MODIFIED"]


def test_too_old_resource_version_is_410(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "HISTORY_LIMIT", 2)
    store = ObjectStore()
    for name in "abcd":
        store.create("nodes", node(name))
    events = collect(store, request("1"), [])
    assert events[0]["type"] == "ERROR"
    assert (events[0]["object"]["code"], events[0]["object"]["reason"]) == (410, "Expired")


def test_bookmarks_carry_the_latest_resource_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("remediator.sim.kube.api.watch.BOOKMARK_INTERVAL", 0.05)
    store = ObjectStore()
    store.create("nodes", node("a"))
    rv = str(store.resource_version)
    events = collect(store, request(rv, timeout=0.2), [])
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[-1]["object"]["metadata"]["resourceVersion"] == rv
