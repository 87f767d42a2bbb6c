"""Opt-outs through the API and the console page on a real database (SQLite and PostgreSQL):
who, why, since, until, scope and cluster are kept; every add and removal is an audit row; bad
input is refused with the reason and writes nothing; an expired opt-out is shown as such; a
read-only token sees them and changes nothing; the page's forms need the CSRF token."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from remediator.web import csrf
from remediator.web.auth import SESSION_COOKIE
from remediator.web.optouts import book_of
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, Console

pytestmark = pytest.mark.integration

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}", "X-Remediator-Actor": "alice"}
READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def _optouts(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/api/v1/optouts", params=params, headers=READONLY)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _audit(client: TestClient) -> list[dict[str, Any]]:
    response = client.get("/api/v1/audit", headers=READONLY)
    assert response.status_code == 200, response.text
    return [a for a in response.json()["items"] if a["command"].startswith("optout")]


def test_an_opt_out_keeps_who_why_since_until_scope_and_cluster_and_is_audited(
    client: TestClient, console: Console
) -> None:
    now = console.clock.now()
    body = {"scope": "pod", "target": "team-a/train-0", "until": "6h", "reason": "eval run"}
    response = client.post("/api/v1/optouts", json=body, headers=OPERATOR)
    assert response.status_code == 201, response.text
    made = response.json()
    assert made["by"].startswith("alice") and made["reason"] == "eval run"
    assert (made["scope"], made["target"], made["cluster"]) == ("pod", "team-a/train-0", "test")
    assert datetime.fromisoformat(made["since"]) == now
    assert datetime.fromisoformat(made["until"]) == now + timedelta(hours=6)
    assert made["state"] == "active"
    assert [o["id"] for o in _optouts(client)] == [made["id"]]
    [added] = _audit(client)
    assert (added["command"], added["outcome"]) == ("optout-add", "done")
    assert added["actor"] == made["by"]
    assert added["reason"] == "eval run" and "pod team-a/train-0" in added["detail"]

    console.clock.advance(6 * 3600)
    assert _optouts(client) == []  # in force only, by default
    [expired] = _optouts(client, all="true")
    assert expired["state"] == "expired"


def test_bad_input_is_refused_with_the_reason_and_audited_as_refused(
    client: TestClient, console: Console
) -> None:
    cases = [
        ({"scope": "node", "target": "gpu-1", "until": "6h", "reason": "   "}, 422, "reason"),
        ({"scope": "node", "target": "gpu-1", "until": "6h"}, 422, "reason"),
        ({"scope": "node", "target": "gpu-1", "until": "8d", "reason": "x"}, 409, "at most 7d"),
        ({"scope": "pod", "target": "no-namespace", "until": "1h", "reason": "x"}, 422, "target"),
        ({"scope": "node", "target": "GPU_1", "until": "1h", "reason": "x"}, 422, "target"),
        ({"scope": "slurm_job", "target": "job-7", "until": "1h", "reason": "x"}, 422, "target"),
        ({"scope": "node", "target": "gpu-1", "until": "soon", "reason": "x"}, 422, "until"),
        ({"scope": "node", "target": "gpu-1", "until": "0s", "reason": "x"}, 422, "until"),
    ]
    for body, status, words in cases:
        response = client.post("/api/v1/optouts", json=body, headers=OPERATOR)
        assert response.status_code == status, (body, response.text)
        assert words in response.text, (body, response.text)
    assert _optouts(client, all="true") == []
    refused = _audit(client)  # no opt-out, but each refusal audited, as every command's
    assert [(r["command"], r["outcome"]) for r in refused] == [("optout-add", "refused")] * 8
    assert "at most 7d" in refused[5]["detail"]


def test_removal_is_audited_and_a_second_one_refused(client: TestClient) -> None:
    body = {"scope": "node", "target": "gpu-1", "until": "1d", "reason": "burn-in"}
    made = client.post("/api/v1/optouts", json=body, headers=OPERATOR).json()
    gone = client.delete(
        f"/api/v1/optouts/{made['id']}", params={"reason": "done early"}, headers=OPERATOR
    )
    assert gone.status_code == 200, gone.text
    assert gone.json()["state"] == "removed" and gone.json()["removed_by"].startswith("alice")
    again = client.delete(f"/api/v1/optouts/{made['id']}", headers=OPERATOR)
    assert again.status_code == 409 and "removed already" in again.text
    assert client.delete("/api/v1/optouts/9999", headers=OPERATOR).status_code == 404
    assert _optouts(client) == []
    unknown, again_row, removed, added = _audit(client)
    assert (unknown["command"], unknown["outcome"]) == ("optout-remove", "not_found")
    assert (again_row["outcome"], again_row["detail"]) == ("refused", again.json()["reason"])
    assert (removed["command"], removed["reason"]) == ("optout-remove", "done early")
    assert added["command"] == "optout-add"


def test_a_read_only_token_sees_opt_outs_and_changes_nothing(client: TestClient) -> None:
    body = {"scope": "node", "target": "gpu-1", "until": "1h", "reason": "x"}
    assert client.post("/api/v1/optouts", json=body, headers=READONLY).status_code == 403
    made = client.post("/api/v1/optouts", json=body, headers=OPERATOR).json()
    assert client.delete(f"/api/v1/optouts/{made['id']}", headers=READONLY).status_code == 403
    assert [o["state"] for o in _optouts(client)] == ["active"]
    assert client.get("/api/v1/optouts").status_code == 401


def _login(client: TestClient, token: str) -> str:
    response = client.post(
        "/login", data={"token": token, "name": "carol", "next": "/"}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    return csrf.token_for(client.cookies[SESSION_COOKIE])


def test_the_page_adds_and_removes_with_the_csrf_token_and_shows_read_only_users(
    client: TestClient,
) -> None:
    token = _login(client, OPERATOR_TOKEN)
    form = {"scope": "node", "target": "gpu-7", "until": "2h", "reason": "NCCL debug"}
    refused = client.post("/optouts", data=form, follow_redirects=False)
    assert refused.status_code == 403 and _optouts(client) == []
    added = client.post("/optouts", data={**form, "csrf_token": token}, follow_redirects=False)
    assert added.status_code == 303, added.text
    page = client.get("/optouts")
    assert page.status_code == 200
    assert "gpu-7" in page.text and "NCCL debug" in page.text and "carol" in page.text
    assert 'action="/optouts"' in page.text  # an operator gets the form
    bad = client.post(
        "/optouts", data={**form, "until": "30d", "csrf_token": token}, follow_redirects=False
    )
    assert bad.status_code == 409 and "max_opt_out" in bad.text
    [made] = _optouts(client)
    removed = client.post(
        f"/optouts/{made['id']}/remove",
        data={"csrf_token": token, "reason": "done"},
        follow_redirects=False,
    )
    assert removed.status_code == 303 and _optouts(client) == []

    client.cookies.clear()
    _login(client, READONLY_TOKEN)
    page = client.get("/optouts?all=true")
    assert page.status_code == 200 and "gpu-7" in page.text
    assert 'action="/optouts"' not in page.text


def test_each_expiry_is_audited_once_whoever_notices_it(
    client: TestClient, console: Console
) -> None:
    book = book_of(console.deps)
    body = {"scope": "slurm_job", "target": "4242", "until": "5s", "reason": "checkpointing"}
    made = client.post("/api/v1/optouts", json=body, headers=OPERATOR).json()
    assert book.expired_unnoted() == ()
    console.clock.advance(5)
    [expired] = book.expired_unnoted()
    assert expired.id == made["id"]
    assert [r.id for r in book.note_expired([expired], "controller a")] == [made["id"]]
    assert book.note_expired([expired], "controller b") == ()  # the other replica: nothing
    assert book.expired_unnoted() == ()
    noted = [a for a in _audit(client) if a["command"] == "optout-expire"]
    assert len(noted) == 1 and noted[0]["actor"] == "controller a"
    assert "slurm job 4242 expired at" in noted[0]["detail"]
