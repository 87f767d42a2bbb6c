"""The console's edge: bodies capped before parsing (declared or streamed), no-store on
answers, 405 with Allow, HEAD on probes, the API docs served from the installed package under
the console's CSP, and node names and numbers checked where they enter."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime

import pytest
from fastapi.testclient import TestClient

from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, Console

pytestmark = pytest.mark.integration

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}
LIMIT = 1_048_576


@pytest.fixture
def reader(shared_console: Console) -> Iterator[TestClient]:
    with TestClient(shared_console.app) as client:
        yield client


def _signal(at: datetime, **changes: object) -> dict[str, object]:
    """A fresh reading: pushes older than a few minutes are refused."""
    return {
        "node": "gpu-node-09",
        "kind": "xid",
        "source": "ops",
        "observed_at": at.isoformat(),
        "code": 79,
        **changes,
    }


def _streamed(payload: bytes, chunk: int = 65_536) -> Iterator[bytes]:
    for start in range(0, len(payload), chunk):
        yield payload[start : start + chunk]


@pytest.mark.parametrize("path", ["/api/v1/signals", "/api/v1/alertmanager"])
def test_bodies_past_the_cap_are_refused_before_parsing(
    reader: TestClient, shared_console: Console, path: str
) -> None:
    now = shared_console.clock.now()
    big = json.dumps([_signal(now, labels={"pad": "x" * LIMIT})]).encode()
    declared = reader.post(
        path, content=big, headers={**OPERATOR, "content-type": "application/json"}
    )
    assert declared.status_code == 413
    assert declared.json()["reason"] == f"request body larger than {LIMIT} bytes"
    # No Content-Length (chunked): counted as it streams in, refused once past the cap.
    streamed = reader.post(
        path, content=_streamed(big), headers={**OPERATOR, "content-type": "application/json"}
    )
    assert streamed.status_code == 413
    assert "content-length" not in {k.lower() for k in streamed.request.headers}
    small = reader.post(
        "/api/v1/signals",
        content=_streamed(json.dumps([_signal(now)]).encode(), 16),
        headers={**OPERATOR, "content-type": "application/json"},
    )
    assert small.status_code == 202


def test_a_form_past_the_cap_is_refused(reader: TestClient) -> None:
    response = reader.post("/login", data={"token": "x" * (LIMIT + 10)})
    assert response.status_code == 413


def test_answers_are_not_cached_but_static_assets_are(reader: TestClient) -> None:
    for path in ("/api/v1/overview", "/", "/remediations", "/login", "/healthz"):
        assert reader.get(path, headers=READONLY).headers["cache-control"] == "no-store", path
    assert "cache-control" not in reader.get("/static/console.css").headers


def test_wrong_method_is_405_with_allow(reader: TestClient) -> None:
    response = reader.delete("/api/v1/overview", headers=READONLY)
    assert response.status_code == 405
    assert response.headers["allow"] == "GET"
    assert response.json()["reason"] == "Method Not Allowed"
    webhook = reader.get("/api/v1/alertmanager", headers=OPERATOR)
    assert webhook.status_code == 405 and webhook.headers["allow"] == "POST"
    # The push API takes signals; GET lists a node's signals with their dispositions.
    signals = reader.delete("/api/v1/signals", headers=OPERATOR)
    assert signals.status_code == 405 and set(signals.headers["allow"].split(", ")) == {
        "GET",
        "POST",
    }


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics"])
def test_probes_answer_head(reader: TestClient, path: str) -> None:
    response = reader.head(path)
    assert response.status_code == 200
    assert response.content == b""


def test_api_docs_are_served_from_the_package_under_the_console_csp(reader: TestClient) -> None:
    page = reader.get("/api/docs")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    scripts = re.findall(r"<script([^>]*)>", page.text)
    assert scripts and all('src="/' in attrs for attrs in scripts), "no inline or remote script"
    assert "http" not in re.sub(r"<!doctype html>", "", page.text)
    for asset in re.findall(r'(?:src|href)="(/[^"]+)"', page.text):
        assert reader.get(asset).status_code == 200, asset


@pytest.mark.parametrize(
    "node", ["GPU-NODE-1", "gpu_node_1", "-gpu", "gpu-", "a..b", "gpu%20node", "x" * 254]
)
def test_node_names_must_be_kubernetes_names(
    reader: TestClient, shared_console: Console, node: str
) -> None:
    assert reader.get(f"/api/v1/nodes/{node}", headers=READONLY).status_code in (404, 422)
    assert (
        reader.get("/api/v1/remediations", params={"node": node}, headers=READONLY).status_code
        == 422
    )
    signal = _signal(shared_console.clock.now(), node=node)
    pushed = reader.post("/api/v1/signals", json=[signal], headers=OPERATOR)
    assert pushed.status_code == 422
    assert "node" in pushed.text
    page = reader.get("/remediations", params={"node": node}, headers=READONLY)
    assert "Ignored: node: " in page.text


def test_node_names_that_are_kubernetes_names_pass(reader: TestClient) -> None:
    for node in ("gpu-node-01", "ip-10-0-3-7.ec2.internal", "a"):
        assert reader.get(f"/api/v1/nodes/{node}", headers=READONLY).status_code == 200


@pytest.mark.parametrize(
    ("field", "raw"),
    [("value", "NaN"), ("value", "1e400"), ("code", "99999999999")],
)
def test_numbers_are_bounded_where_they_enter(
    reader: TestClient, shared_console: Console, field: str, raw: str
) -> None:
    at = shared_console.clock.now().isoformat()
    kind = "thermal" if field == "value" else "xid"
    body = (
        f'[{{"node": "gpu-node-09", "kind": "{kind}", "source": "ops", '
        f'"observed_at": "{at}", "{field}": {raw}}}]'
    )
    response = reader.post(
        "/api/v1/signals",
        content=body.encode(),
        headers={**OPERATOR, "content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert field in response.text
