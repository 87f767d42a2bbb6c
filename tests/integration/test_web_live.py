"""Live pages and down sources: the marker pages poll changes when something they show could
change; a down signal source is a banner on every page and named by /readyz, which stays
ready (the console works without it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from remediator.model.states import State
from tests.fixtures.web import READONLY_TOKEN, Console

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def _version(client: TestClient) -> str:
    response = client.get("/api/v1/live", headers=READONLY)
    assert response.status_code == 200
    version: str = response.json()["version"]
    return version


def test_the_marker_moves_with_what_pages_show(client: TestClient, console: Console) -> None:
    start = _version(client)
    assert _version(client) == start  # nothing happened: pages stay as they are
    rid = console.ids["draining"]
    console.repository.transition(
        rid, State.DRAINING, State.REPLACING, action="drain_done", actor="controller-0"
    )
    moved = _version(client)
    assert moved != start
    console.repository.append_event(rid, action="progress", actor="controller-0")
    noted = _version(client)
    assert noted != moved
    console.repository.pause(by="alice", reason="maintenance")
    paused = _version(client)
    assert paused != noted
    console.repository.record_source_health("prometheus", up=True)
    up = _version(client)
    console.repository.record_source_health("prometheus", up=True)
    assert _version(client) == up  # a healthy poll of a healthy source changes nothing
    console.repository.record_source_health("prometheus", up=False, error="timed out")
    assert _version(client) != up


def test_live_pages_say_so_and_finished_ones_do_not(client: TestClient, console: Console) -> None:
    ids = console.ids
    for path in ("/", f"/remediations/{ids['draining']}", "/remediations", "/nodes/gpu-node-05"):
        page = client.get(path, headers=READONLY).text
        assert 'data-live="/api/v1/live"' in page, path
        assert f'data-version="{_version(client)}"' in page, path
    for path in (f"/remediations/{ids['done']}", "/nodes/gpu-node-01", "/policies"):
        assert "data-live" not in client.get(path, headers=READONLY).text, path


def test_a_down_source_is_a_banner_everywhere_and_named_by_readyz(
    client: TestClient, console: Console
) -> None:
    console.repository.record_source_health("alertmanager", up=True)
    assert client.get("/readyz").json()["sources_down"] == []
    console.repository.record_source_health(
        "prometheus", up=False, error="Prometheus unreachable at http://prom:9090"
    )
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "problems": [],
        "sources_down": ["prometheus: Prometheus unreachable at http://prom:9090"],
    }
    ids = console.ids
    for path in (
        "/",
        "/remediations",
        f"/remediations/{ids['done']}",
        "/nodes/gpu-node-01",
        "/policies",
        "/audit",
        "/runbooks/xid-79",
    ):
        page = client.get(path, headers=READONLY).text
        assert "Signal source prometheus is down" in page, path
        assert 'href="/runbooks/source-down"' in page, path
    assert "alertmanager is down" not in client.get("/", headers=READONLY).text
