"""`GET /api/v1/signals?node=` and the node page show what became of each signal taken in, so an
accepted signal that opened nothing says why (issue 22 item 11)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from remediator.signals.model import Signal, SignalKind
from tests.fixtures.web import READONLY_TOKEN, Console

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}
NODE = "gpu-node-01"


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def test_each_signal_is_listed_with_its_disposition(client: TestClient, console: Console) -> None:
    now = console.clock.now()
    folded = (
        "folded: the same XID 79 on GPU 1 was taken in at 2026-01-01T00:00:00+00:00 "
        "(fold window 5m)"
    )
    signals = [
        Signal(
            node=NODE,
            kind=SignalKind.XID,
            source="push",
            observed_at=now - timedelta(minutes=minutes),
            gpu=1,
            code=79,
        )
        for minutes in (1, 2)
    ]
    console.repository.insert_signals(signals, dispositions=[folded, "joined #7"])

    response = client.get("/api/v1/signals", params={"node": NODE, "limit": 2}, headers=READONLY)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["node"] == NODE and body["total"] == 3  # and the seeded XID 79
    assert [item["disposition"] for item in body["items"]] == [folded, "joined #7"]
    following = client.get(
        "/api/v1/signals",
        params={"node": NODE, "limit": 2, "cursor": body["next_cursor"]},
        headers=READONLY,
    ).json()
    assert len(following["items"]) == 1 and following["next_cursor"] is None
    assert (
        client.get("/api/v1/signals", params={"node": "bad name!"}, headers=READONLY).status_code
        == 422
    )
    assert client.get("/api/v1/signals", params={"node": NODE}).status_code == 401

    html = client.get(f"/nodes/{NODE}", headers=READONLY).text
    assert "what became of it" in html and "joined #7" in html and "fold window 5m" in html
