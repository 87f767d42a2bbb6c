"""Who did what: every human command leaves an append-only audit row (done or refused), shown
at /audit and GET /api/v1/audit; logins are opaque server-side sessions that logout revokes;
refused logins and requests are counted and logged without the token."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from prometheus_client import generate_latest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from remediator.web import csrf
from remediator.web.auth import SESSION_COOKIE, fingerprint
from remediator.web.oncall import declares_command
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, Console

pytestmark = pytest.mark.integration

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}", "X-Remediator-Actor": "alice"}
READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def _login(client: TestClient, token: str, name: str = "carol") -> str:
    response = client.post(
        "/login", data={"token": token, "name": name, "next": "/"}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    return csrf.token_for(client.cookies[SESSION_COOKIE])


def _audit(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/api/v1/audit", params=params, headers=READONLY)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def test_every_command_is_an_audit_row_with_who_where_and_why(
    client: TestClient, console: Console
) -> None:
    ids = console.ids
    post = client.post
    assert (
        post(
            f"/api/v1/remediations/{ids['approval']}/approve",
            json={"reason": "GPU checked"},
            headers=OPERATOR,
        ).status_code
        == 200
    )
    assert post(f"/api/v1/remediations/{ids['failed']}/retry", headers=OPERATOR).status_code == 200
    assert post(f"/api/v1/remediations/{ids['done']}/cancel", headers=OPERATOR).status_code == 409
    for command in ("pause", "resume"):
        body = {"reason": f"{command} for the maintenance window"}
        assert post(f"/api/v1/controller/{command}", json=body, headers=OPERATOR).status_code == 200
    console.repository.trip_breaker(reason="6 nodes in 5 minutes")
    body = {"reason": "storm was one bad switch"}
    assert post("/api/v1/controller/reset-breaker", json=body, headers=OPERATOR).status_code == 200
    token = _login(client, OPERATOR_TOKEN, "bob")
    form = {"csrf_token": token, "reason": "pod owner agreed", "confirm": "yes"}
    assert post(f"/remediations/{ids['opt_out']}/release", data=form).status_code == 200
    assert post(f"/remediations/{ids['held']}/cancel", data=form).status_code == 200

    rows = _audit(client)
    assert [(r["command"], r["outcome"], r.get("remediation_id")) for r in rows] == [
        ("cancel", "done", ids["held"]),
        ("release", "done", ids["opt_out"]),
        ("reset-breaker", "done", None),
        ("resume", "done", None),
        ("pause", "done", None),
        ("cancel", "refused", ids["done"]),
        ("retry", "done", ids["failed"]),
        ("approve", "done", ids["approval"]),
    ]
    approve = rows[-1]
    assert approve["actor"] == f"alice (operator token {fingerprint(OPERATOR_TOKEN)})"
    assert approve["token_id"] == fingerprint(OPERATOR_TOKEN)
    assert approve["source"] == "testclient"
    assert approve["reason"] == "GPU checked"
    assert approve["at"].startswith("2026-01-10")
    assert "already finished" in rows[5]["detail"]
    assert rows[0]["actor"].startswith("bob (operator token")
    # Pause and resume keep their history: both rows, each with its reason.
    assert [r["reason"] for r in _audit(client, command="pause")] == [
        "pause for the maintenance window"
    ]
    assert len(_audit(client, remediation_id=ids["held"])) == 1
    assert len(_audit(client, limit=3)) == 3

    page = client.get("/audit").text
    for row in rows:
        assert f'data-audit="{row["id"]}"' in page
    assert "pod owner agreed" in page and "testclient" in page
    overview = client.get("/").text
    assert "resume for the maintenance window" in overview  # the switches' history


def test_the_audit_log_is_append_only(console: Console) -> None:
    console.repository.pause(by="x", reason="y")
    engine = console.repository.session_factory.kw["bind"]
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO audit_log (cluster, at, actor, token_id, source, command, outcome) "
                "VALUES ('test', CURRENT_TIMESTAMP, 'a', 'b', 'c', 'pause', 'done')"
            )
        )
    for statement in ("UPDATE audit_log SET actor = 'someone else'", "DELETE FROM audit_log"):
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text(statement))


def test_the_session_cookie_is_opaque_and_logout_revokes_it(
    client: TestClient, console: Console
) -> None:
    token = _login(client, OPERATOR_TOKEN)
    session_id = client.cookies[SESSION_COOKIE]
    assert OPERATOR_TOKEN not in session_id and len(session_id) >= 40
    assert client.get("/api/v1/overview").status_code == 200
    out = client.post("/logout", data={"csrf_token": token}, follow_redirects=False)
    assert out.status_code == 303
    # The same cookie, replayed after logout (a copy an attacker kept), no longer works.
    replay = TestClient(console.app, cookies={SESSION_COOKIE: session_id})
    assert replay.get("/api/v1/overview").status_code == 401


def test_a_session_ends_when_its_token_leaves_the_configuration(
    client: TestClient, console: Console
) -> None:
    _login(client, READONLY_TOKEN)
    assert client.get("/api/v1/overview").status_code == 200
    console.deps.settings.web.readonly_tokens = [SecretStr("a-new-token-0123456789")]
    assert client.get("/api/v1/overview").status_code == 401


def test_the_cookie_is_secure_when_the_console_is_reached_over_https(
    client: TestClient, console: Console
) -> None:
    plain = client.post("/login", data={"token": READONLY_TOKEN}, follow_redirects=False)
    assert "secure" not in plain.headers["set-cookie"].lower()
    console.deps.settings.web.external_url = "https://remediator.example.com"
    secure = client.post("/login", data={"token": READONLY_TOKEN}, follow_redirects=False)
    assert "; secure" in secure.headers["set-cookie"].lower()


def test_refused_logins_and_requests_are_counted_and_logged_without_the_token(
    client: TestClient, console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    guess = "guessed-token-abcdef-0123456789"
    with caplog.at_level(logging.INFO):
        assert client.post("/login", data={"token": guess}).status_code == 401
        bad = {"Authorization": f"Bearer {guess}"}
        assert client.get("/api/v1/overview", headers=bad).status_code == 401
        rid = console.ids["approval"]
        assert (
            client.post(f"/api/v1/remediations/{rid}/approve", headers=READONLY).status_code == 403
        )
    metrics = generate_latest(console.deps.registry).decode()
    assert 'remediator_console_auth_failures_total{kind="login"} 1.0' in metrics
    assert 'remediator_console_auth_failures_total{kind="unauthenticated"} 1.0' in metrics
    assert 'remediator_console_auth_failures_total{kind="forbidden"} 1.0' in metrics
    logged = "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)
    assert "login refused from testclient" in logged
    assert "/api/v1/overview refused (401)" in logged
    assert guess not in logged and READONLY_TOKEN not in logged


def test_a_read_only_tokens_refused_commands_are_audited(
    client: TestClient, console: Console
) -> None:
    """The audit page promises every command a person asked for, done or refused: a read-only
    token's 403s are refusals like the 409s."""
    rid = console.ids["approval"]
    bob = {**READONLY, "X-Remediator-Actor": "bob"}
    response = client.post(
        f"/api/v1/remediations/{rid}/approve", json={"reason": "looks fine"}, headers=bob
    )
    assert response.status_code == 403, response.text
    response = client.post("/api/v1/controller/pause", json={"reason": "storm"}, headers=bob)
    assert response.status_code == 403, response.text
    client.cookies.clear()
    _login(client, READONLY_TOKEN, "dave")
    response = client.post(
        f"/remediations/{rid}/release", data={"reason": "from the page"}, follow_redirects=False
    )
    assert response.status_code == 403, response.text

    rows = _audit(client)
    assert [(r["command"], r["outcome"], r.get("remediation_id")) for r in rows[:3]] == [
        ("release", "refused", rid),
        ("pause", "refused", None),
        ("approve", "refused", rid),
    ]
    page_row, pause, approve = rows[:3]
    assert approve["actor"].startswith("bob (readonly token")
    assert approve["reason"] == "looks fine"
    assert "read-only" in approve["detail"]
    assert pause["reason"] == "storm"
    assert page_row["actor"].startswith("dave (readonly token")
    assert page_row["reason"] == "from the page"
    assert console.repository.get(rid).state.value == "awaiting_approval"  # type: ignore[union-attr]


# Writes that are not a person's command: signed in and out, machines' pushes, a dry replay.
NOT_COMMANDS = {
    "/login",
    "/logout",
    "/backtest",
    "/api/v1/signals",
    "/api/v1/agents/heartbeat",
    "/api/v1/alertmanager",
}


def _calls(dependant: Dependant) -> Iterator[object]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def test_every_route_that_writes_is_a_command_whose_refusals_are_audited(
    console: Console,
) -> None:
    """Refusals are audited in one place (the console's error handlers) for every request a
    command dependency noted first: a new route that writes must take one, or be listed here
    as no one's command."""
    undeclared = [
        (route.path, sorted(route.methods))
        for route in console.app.routes
        if isinstance(route, APIRoute)
        and route.methods - {"GET", "HEAD", "OPTIONS"}
        and route.path not in NOT_COMMANDS
        and not any(declares_command(call, route.path) for call in _calls(route.dependant))
    ]
    assert undeclared == []


def test_a_refused_opt_out_is_audited_under_its_command(
    client: TestClient, console: Console
) -> None:
    """A read-only token's opt-out and an unknown opt-out's removal: both refusals are rows."""
    body = {"scope": "node", "target": "gpu-node-01", "until": "2h", "reason": "benchmark"}
    added = client.post("/api/v1/optouts", json=body, headers=READONLY)
    assert added.status_code == 403, added.text
    removed = client.delete("/api/v1/optouts/999?reason=done", headers=OPERATOR)
    assert removed.status_code == 404, removed.text
    rows = _audit(client)
    assert [(r["command"], r["outcome"], r["reason"]) for r in rows[:2]] == [
        ("optout-remove", "not_found", "done"),
        ("optout-add", "refused", "benchmark"),
    ]
