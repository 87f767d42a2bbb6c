"""What the OpenAPI document promises, the API does: each finding of a schemathesis run (all
checks) as a named case, so a regression says which promise broke."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fixtures.web import OPERATOR_TOKEN, PUSH_TOKEN, Console

pytestmark = pytest.mark.integration

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def _body_schema(doc: dict[str, Any], path: str) -> dict[str, Any]:
    content = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    schema: dict[str, Any] = content["schema"]
    while "$ref" in schema or "anyOf" in schema:
        if "anyOf" in schema:
            schema = next(s for s in schema["anyOf"] if s.get("type") != "null")
            continue
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_an_empty_cursor_is_the_first_page(client: TestClient, console: Console) -> None:
    assert client.get("/api/v1/remediations?cursor=", headers=OPERATOR).status_code == 200
    node = client.get(
        "/api/v1/nodes/gpu-node-01?remediations_cursor=&signals_cursor=", headers=OPERATOR
    )
    assert node.status_code == 200, node.text


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_each_command_declares_only_the_options_it_takes(client: TestClient) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    for command in ("approve", "release", "retry"):
        props = _body_schema(doc, f"/api/v1/remediations/{{remediation_id}}/{command}")
        assert "cooldown" not in props["properties"], command
    assert (
        "cooldown"
        in _body_schema(doc, "/api/v1/remediations/{remediation_id}/cancel")["properties"]
    )
    for command in ("pause", "resume"):
        props = _body_schema(doc, f"/api/v1/controller/{command}")
        assert "drop_queued" not in props["properties"], command
    assert "drop_queued" in _body_schema(doc, "/api/v1/controller/reset-breaker")["properties"]


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_the_duration_format_is_in_the_schema(client: TestClient, console: Console) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    cooldown = _body_schema(doc, "/api/v1/remediations/{remediation_id}/cancel")["properties"][
        "cooldown"
    ]
    cooldown = next(s for s in cooldown.get("anyOf", [cooldown]) if s.get("type") != "null")
    pattern = re.compile(cooldown["pattern"])
    for good in ("90s", "2m", "1h30m", "7d", "0s"):
        assert pattern.search(good), good
    for bad in ("", "P1D", "30m1h", "90", "1x"):
        assert not pattern.search(bad), bad
    rid = console.ids["draining"]
    response = client.post(
        f"/api/v1/remediations/{rid}/cancel",
        json={"reason": "wrong node", "cooldown": "1h30m"},
        headers=OPERATOR,
    )
    assert response.status_code == 200, response.text
    record = console.repository.get(rid)
    assert record is not None and record.suppressed_until is not None
    assert record.suppressed_until - console.clock.now() == timedelta(hours=1, minutes=30)


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_the_heartbeat_stats_key_pattern_is_in_the_schema(client: TestClient) -> None:
    doc = client.get("/api/v1/openapi.json").json()
    stats = _body_schema(doc, "/api/v1/agents/heartbeat")["properties"]["stats"]
    names = stats["propertyNames"]
    assert names["pattern"] and names["maxLength"] == 64


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_drop_queued_is_a_boolean_not_a_number(client: TestClient, console: Console) -> None:
    console.repository.trip_breaker(reason="storm")
    response = client.post(
        "/api/v1/controller/reset-breaker",
        json={"reason": "one switch", "drop_queued": 0},
        headers=OPERATOR,
    )
    assert response.status_code == 422, response.text
    assert console.repository.controller_status().breaker_tripped


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_signals_errors_answer_like_every_other_route(client: TestClient) -> None:
    push = {"Authorization": f"Bearer {PUSH_TOKEN}"}
    for body in ([{"node": ""}], "not json"):
        if isinstance(body, str):
            response = client.post(
                "/api/v1/signals",
                content=body,
                headers={**push, "Content-Type": "application/json"},
            )
        else:
            response = client.post("/api/v1/signals", json=body, headers=push)
        assert response.status_code == 422, response.text
        answer = response.json()
        assert isinstance(answer["reason"], str) and answer["reason"]
        assert isinstance(answer["detail"], list) and answer["detail"]
