"""What the OpenAPI document promises, the API does: each finding of a schemathesis run (all
checks) as a named case, so a regression says which promise broke."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from remediator.signals.model import Signal, SignalKind
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


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_number_is_not_a_time(client: TestClient) -> None:
    """A time is RFC 3339 text, as the schema says: a bare number (read as Unix seconds by
    pydantic's lax mode) is refused, wherever a time is a query parameter."""
    for query in (
        "/api/v1/remediations?created_from=12345",
        "/api/v1/remediations?created_to=1.5",
        "/api/v1/remediations?finished_from=0",
        "/api/v1/nodes/gpu-node-01?from=12345",
        "/api/v1/nodes/gpu-node-01?to=1700000000",
    ):
        response = client.get(query, headers=OPERATOR)
        assert response.status_code == 422, f"{query}: {response.text}"
    good = client.get("/api/v1/remediations?created_from=2026-01-10T08:00:00Z", headers=OPERATOR)
    assert good.status_code == 200, good.text


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_repeated_single_valued_parameter_is_refused(client: TestClient) -> None:
    """`?q=a&q=b` is not one value: refused, never silently the last one. A list (`state`)
    takes its repeats."""
    for query in (
        "/api/v1/remediations?q=gpu-node-01&q=gpu-node-02",
        "/api/v1/remediations?limit=1&limit=2",
        "/api/v1/audit?command=pause&command=resume",
        "/api/v1/nodes/gpu-node-01?limit=1&limit=2",
    ):
        response = client.get(query, headers=OPERATOR)
        assert response.status_code == 422, f"{query}: {response.text}"
        assert "given 2 times" in response.text, response.text
    listed = client.get("/api/v1/remediations?state=held&state=failed", headers=OPERATOR)
    assert listed.status_code == 200, listed.text
    assert {r["state"] for r in listed.json()["items"]} == {"held", "failed"}


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_no_answer_offers_a_null_remediation_id(client: TestClient, console: Console) -> None:
    """A row that concerns no remediation (a controller command in the audit, a signal no
    remediation took) leaves `remediation_id` out rather than null: the schema's links from
    that field (to /remediations/{remediation_id}) never lead to /remediations/None."""
    assert client.post(
        "/api/v1/controller/pause", json={"reason": "maintenance"}, headers=OPERATOR
    ).is_success
    audit = client.get("/api/v1/audit", headers=OPERATOR).json()["items"]
    pause = next(a for a in audit if a["command"] == "pause")
    assert "remediation_id" not in pause, pause
    console.repository.insert_signals(
        [
            Signal(
                node="gpu-node-01",
                kind=SignalKind.THERMAL,
                source="dcgm",
                observed_at=console.clock.now(),
                gpu=0,
                value=71.0,
            )
        ],
        remediation_id=None,
    )
    node = client.get("/api/v1/nodes/gpu-node-01", headers=OPERATOR).json()
    loose = [s for s in node["signals"] if s["signal"]["kind"] == "thermal"]
    assert loose and all("remediation_id" not in s for s in loose), loose
    assert all(isinstance(s["remediation_id"], int) for s in node["signals"] if s not in loose)
    doc = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    for model in ("AuditOut", "SignalEntryOut"):
        field = doc[model]["properties"]["remediation_id"]
        assert field.get("type") == "integer" and "anyOf" not in field, (model, field)
        assert "remediation_id" not in doc[model].get("required", []), model


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_the_push_schema_states_the_bounds_the_push_keeps(client: TestClient) -> None:
    """Each kind's code and value range is in the request schema, so a request the schema
    allows is one the push takes (a stateful run sent a thermal code of 2**63-1)."""
    doc = client.get("/api/v1/openapi.json").json()
    body = doc["paths"]["/api/v1/signals"]["post"]["requestBody"]["content"]["application/json"]
    validator = jsonschema.Draft202012Validator(body["schema"])
    base = {"node": "gpu-node-01", "source": "dcgm", "observed_at": "2026-01-10T08:00:00Z"}
    for item in (
        {**base, "kind": "thermal", "value": 80.0, "code": 2**63 - 1},
        {**base, "kind": "thermal", "value": 250.0},
        {**base, "kind": "xid", "code": 70_000},
        {**base, "kind": "xid", "code": 0},
        {**base, "kind": "ecc", "value": 1e300},
        {**base, "kind": "ecc", "code": -1},
    ):
        assert list(validator.iter_errors([item])), item
    for item in (
        {**base, "kind": "thermal", "value": 80.0},
        {**base, "kind": "xid", "code": 65_535},
        {**base, "kind": "ecc", "value": 1e15, "code": 2**31 - 1},
    ):
        assert not list(validator.iter_errors([item])), item


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_an_empty_window_answers_nothing_rather_than_an_error(client: TestClient) -> None:
    """[T, T) is a window with nothing in it (a stateful run sent from = to), and so is one
    whose start is after its end (#39 item 23: schemathesis' coverage phase sent one, a rule
    between two parameters that no schema can state)."""
    window = "from=2026-01-10T08:00:00Z&to=2026-01-10T08:00:00Z"
    signals = client.get(f"/api/v1/signals?node=gpu-node-01&{window}", headers=OPERATOR)
    assert signals.status_code == 200, signals.text
    assert signals.json()["items"] == []
    node = client.get(f"/api/v1/nodes/gpu-node-01?{window}", headers=OPERATOR)
    assert node.status_code == 200, node.text
    assert node.json()["remediations"] == [] and node.json()["signals"] == []
    backwards = "from=2026-01-10T09:00:00Z&to=2026-01-10T08:00:00Z"
    empty = client.get(f"/api/v1/signals?node=gpu-node-01&{backwards}", headers=OPERATOR)
    assert empty.status_code == 200, empty.text
    assert empty.json()["items"] == [] and empty.json()["total"] == 0
