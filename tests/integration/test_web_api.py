"""The JSON API and the console's forms over real SQLite and PostgreSQL, through the FastAPI test
client: filters and cursors, detail, node and policy views, every command with its refusals,
authentication and CSRF on every mutating route, the push endpoints, probes and metrics."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from remediator.errors import ApiUnavailable, PolicyError
from remediator.model.states import State
from remediator.signals.model import SignalKind
from remediator.signals.sources.push import SignalInbox
from remediator.store import cursor as cursors
from remediator.store import db
from remediator.store.repository import Repository
from remediator.web import csrf
from remediator.web.app import create_app
from remediator.web.auth import SESSION_COOKIE, fingerprint
from remediator.web.deps import WebDeps
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, START, Console, Seeder

pytestmark = pytest.mark.integration

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


@pytest.fixture
def reader(shared_console: Console) -> Iterator[TestClient]:
    """A client over the module's shared history: for tests that change nothing."""
    with TestClient(shared_console.app) as test_client:
        yield test_client


def _ids(body: dict[str, Any]) -> list[int]:
    return [item["id"] for item in body["items"]]


# -- reads ------------------------------------------------------------------------------------


def test_list_puts_in_flight_first_then_newest(reader: TestClient, shared_console: Console) -> None:
    ids = shared_console.ids
    body = reader.get("/api/v1/remediations", headers=READONLY).json()
    open_ids = [ids["held"], ids["draining"], ids["opt_out"], ids["approval"]]
    assert _ids(body) == [*open_ids, ids["failed"], ids["done"]]
    assert body["next_cursor"] is None
    newest = reader.get("/api/v1/remediations?in_flight_first=false", headers=READONLY).json()
    assert _ids(newest) == sorted(ids.values(), reverse=True)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("state=awaiting_approval", ["approval"]),
        ("state=held&state=held_by_opt_out", ["held", "opt_out"]),
        ("q=NODE-0", ["held", "draining", "opt_out", "approval", "failed", "done"]),
        ("q=de-05", ["draining"]),
        ("node=gpu-node-01", ["done"]),
        ("pool=pool-a", ["opt_out", "approval", "done"]),
        ("signal_kind=thermal", ["approval"]),
        ("xid=79", ["held", "done"]),
        ("policy=xid-74-nvlink", ["opt_out"]),
        ("dry_run=true", []),
        ("created_from=2026-01-10T08:09:00Z", ["held", "draining"]),
        ("created_to=2026-01-10T08:01:00", ["done"]),
    ],
)
def test_list_filters(
    reader: TestClient, shared_console: Console, query: str, expected: list[str]
) -> None:
    response = reader.get(f"/api/v1/remediations?{query}", headers=READONLY)
    assert response.status_code == 200, response.text
    assert _ids(response.json()) == [shared_console.ids[name] for name in expected]


def test_cursor_pages_cover_every_row_once(reader: TestClient, shared_console: Console) -> None:
    seen: list[int] = []
    url = "/api/v1/remediations?limit=2"
    for _ in range(10):
        body = reader.get(url, headers=READONLY).json()
        seen += _ids(body)
        if body["next_cursor"] is None:
            break
        url = f"/api/v1/remediations?limit=2&cursor={body['next_cursor']}"
    assert sorted(seen) == sorted(shared_console.ids.values())
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(
    "bad",
    [
        "not-a-cursor",
        cursors.encode(cursors.Cursor("open", START, 2**70, START)),
        cursors.encode(
            cursors.Cursor(
                "open", datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), 1, START
            )
        ),
        "open.1.1",  # an in-flight-first cursor without the time its first page was read
    ],
)
def test_a_text_outside_the_cursor_grammar_is_refused_by_the_schema(
    reader: TestClient, bad: str
) -> None:
    """#39 item 23: the schema states the cursor's grammar (a 422 like any parameter it
    refuses); a text it allows is never a 400."""
    response = reader.get(f"/api/v1/remediations?cursor={bad}", headers=READONLY)
    assert response.status_code == 422, response.text
    assert "cursor" in response.text


def test_a_cursor_continues_its_own_listing(reader: TestClient, shared_console: Console) -> None:
    """A cursor of the newest-first listing, passed with the default in-flight-first order:
    the schema cannot state a rule between two parameters, so the cursor's own order wins."""
    url = "/api/v1/remediations?limit=2&in_flight_first=false"
    first = reader.get(url, headers=READONLY).json()
    plain = reader.get(url, headers=READONLY).json()["next_cursor"]
    response = reader.get(f"/api/v1/remediations?limit=50&cursor={plain}", headers=READONLY)
    assert response.status_code == 200, response.text
    rest = _ids(response.json())
    assert sorted(_ids(first) + rest) == sorted(shared_console.ids.values())


def test_detail_has_timeline_pods_policy_and_xid(
    reader: TestClient, shared_console: Console
) -> None:
    body = reader.get(f"/api/v1/remediations/{shared_console.ids['done']}", headers=READONLY).json()
    assert body["state"] == "succeeded"
    assert [e["to_state"] for e in body["events"] if e["to_state"]] == [
        "detected",
        "quarantined",
        "checkpointing",
        "draining",
        "replacing",
        "verifying",
        "succeeded",
    ]
    pods = {p["pod"]: p for p in body["pods"]}
    assert pods["train/worker-0"]["checkpoint"] == "checkpointed"
    assert pods["train/worker-0"]["drain"] == "evicted"
    assert pods["train/worker-1"]["checkpoint"] == "did not answer"
    assert body["new_node"] == "gpu-node-91"
    assert body["replacement_operation_id"] == "op-7781"
    assert body["policy_source"]["file"] == "gpu-lost.yaml"
    assert "name: xid-79-fallen-off-bus" in body["policy_source"]["yaml"]
    assert "fallen off the bus" in body["xid_explanation"]
    assert body["runbook_url"] == "/runbooks/xid-79"
    assert body["duration_seconds"] == pytest.approx(440.0)


def test_detail_policy_text_comes_from_the_recorded_set_after_a_change(
    client: TestClient, console: Console
) -> None:
    console.policies.active = None  # a newer set (or none) is active now
    body = client.get(f"/api/v1/remediations/{console.ids['done']}", headers=READONLY).json()
    assert "name: xid-79-fallen-off-bus" in body["policy_source"]["yaml"]


def test_unknown_remediation_is_404_json(reader: TestClient) -> None:
    response = reader.get("/api/v1/remediations/999999", headers=READONLY)
    assert response.status_code == 404
    assert response.json()["reason"] == "remediation 999999 not found"


def test_node_history_and_repeat_offender(client: TestClient, console: Console) -> None:
    body = client.get("/api/v1/nodes/gpu-node-01", headers=READONLY).json()
    assert [r["id"] for r in body["remediations"]] == [console.ids["done"]]
    assert [s["signal"]["code"] for s in body["signals"]] == [79]
    assert body["repeat_offender"] is False

    seeder = Seeder(console)
    for _ in range(3):
        rid = seeder.create("gpu-node-01", "xid-79-fallen-off-bus", SignalKind.XID, 79)
        seeder.walk(rid, State.SUCCEEDED)
    body = client.get("/api/v1/nodes/gpu-node-01", headers=READONLY).json()
    # The shipped policies escalate on a 2nd remediation within a week (xid-64-95-repeated).
    assert body["remediations_in_window"] == 4
    assert body["repeat_offender"] is True


def test_policies_show_active_set_and_last_error(client: TestClient, console: Console) -> None:
    body = client.get("/api/v1/policies", headers=READONLY).json()
    assert body["last_error"] is None
    names = {p["name"] for p in body["active"]["policies"]}
    assert {"xid-79-fallen-off-bus", "gpu-overheat"} <= names
    console.policies.last_error = PolicyError(["thermal.yaml:4: policies[0].why: field required"])
    body = client.get("/api/v1/policies", headers=READONLY).json()
    assert body["last_error"] == ["thermal.yaml:4: policies[0].why: field required"]
    page = client.get("/policies", headers=READONLY)
    assert "newest policy commit was refused" in page.text
    assert "field required" in page.text


def test_overview_counts(reader: TestClient) -> None:
    body = reader.get("/api/v1/overview", headers=READONLY).json()
    assert body["in_flight"] == 1  # draining; the three waiting for a human have tiles of their own
    assert body["awaiting_approval"] == 1
    assert body["held_by_opt_out"] == 1
    assert body["held"] == 1
    assert body["failed_last_24h"] == 1
    assert body["open_by_pool"] == {"pool-a": 2, "pool-b": 2}
    assert body["controller"]["paused"] is False


def test_overview_tiles_count_what_their_links_list(reader: TestClient) -> None:
    page = reader.get("/", headers=READONLY).text
    tiles = re.findall(r'<a class="tile [^"]*" href="([^"]+)"><div class="n">(\d+)</div>', page)
    assert len(tiles) == 7  # in flight, the three waiting for a human, failed, repaired, replaced
    for href, count in tiles:
        listed = reader.get(html.unescape(href), headers=READONLY).text
        rows = re.findall(r'<tr class="[^"]*" data-id="(\d+)">', listed)
        assert len(rows) == int(count), href


def test_waiting_list_shows_every_remediation_that_needs_a_human(
    reader: TestClient, shared_console: Console
) -> None:
    page = reader.get("/", headers=READONLY).text
    waiting = page[page.index('id="waiting"') : page.index("<h2>In flight</h2>")]
    ids = shared_console.ids
    found = set(re.findall(r'<tr data-id="(\d+)">', waiting))
    assert found == {str(ids[k]) for k in ("approval", "opt_out", "failed", "held")}
    assert "no spare capacity in pool-b" in waiting
    assert "retry</strong></a>: asks the node pool for a new replacement of gpu-node-04" in waiting
    assert "PodDisruptionBudget serve/api allows 0" in waiting
    assert 'href="/runbooks/drain-stuck-pdb"' in waiting
    detail = reader.get(f"/api/v1/remediations/{ids['failed']}", headers=READONLY).json()
    assert detail["needs_human"] == "node pool API: no spare capacity in pool-b"
    assert [a["command"] for a in detail["next_actions"]] == ["retry", "cancel"]
    assert detail["ladder"][detail["current_step"]]["action"] == "replace"


# -- commands ---------------------------------------------------------------------------------


def _post(client: TestClient, path: str, body: Any = None, **headers: str) -> Any:
    return client.post(path, json=body, headers={**OPERATOR, **headers})


def test_approve_records_who_and_why(client: TestClient, console: Console) -> None:
    rid = console.ids["approval"]
    response = _post(
        client,
        f"/api/v1/remediations/{rid}/approve",
        {"reason": "checked"},
        **{"X-Remediator-Actor": "alice"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "quarantined"
    last = console.repository.get(rid).events[-1]  # type: ignore[union-attr]
    assert last.actor == f"alice (operator token {fingerprint(OPERATOR_TOKEN)})"
    assert (last.from_state, last.to_state) == (State.AWAITING_APPROVAL, State.QUARANTINED)
    assert last.detail == {"command": "approve", "reason": "checked"}

    again = _post(client, f"/api/v1/remediations/{rid}/approve")
    assert again.status_code == 409
    assert "not awaiting_approval" in again.json()["reason"]


@pytest.mark.parametrize(
    ("name", "command", "expected"),
    [
        ("failed", "retry", State.REPLACING),
        # Its ladder is cordon, drain, replace: released, it goes on to the drain.
        ("opt_out", "release", State.DRAINING),
        ("held", "release", State.DRAINING),
        ("draining", "cancel", State.CANCELLED),
        ("failed", "cancel", State.CANCELLED),
    ],
)
def test_commands_move_to_the_right_state(
    client: TestClient, console: Console, name: str, command: str, expected: State
) -> None:
    rid = console.ids[name]
    response = _post(client, f"/api/v1/remediations/{rid}/{command}")
    assert response.status_code == 200, response.text
    record = console.repository.get(rid)
    assert record is not None and record.state is expected
    if command != "cancel":  # a cancelled remediation keeps its error and hold for the record
        assert record.error is None and record.hold_reason is None
    assert record.events[-1].actor == f"operator token {fingerprint(OPERATOR_TOKEN)}"


@pytest.mark.parametrize(
    ("name", "command", "reason"),
    [
        ("done", "cancel", "already finished"),
        ("done", "retry", "not failed"),
        ("draining", "release", "not held"),
        ("approval", "retry", "not failed"),
    ],
)
def test_commands_refused_with_409(
    client: TestClient, console: Console, name: str, command: str, reason: str
) -> None:
    response = _post(client, f"/api/v1/remediations/{console.ids[name]}/{command}")
    assert response.status_code == 409
    assert reason in response.json()["reason"]


def test_a_cancel_while_the_cluster_does_not_answer_is_503_and_changes_nothing(
    client: TestClient, console: Console
) -> None:
    """Found by the chaos soak: the cancel reads which of the node's machines stay fenced from
    the cluster; a failing Kubernetes API answered 500. Now: 503 with Retry-After, nothing
    written, and the cancel goes through once the cluster answers."""
    rid = console.ids["draining"]

    def unreachable(_node: str) -> str | None:
        raise ApiUnavailable("get node: the API server answered 503", delay=2.5)

    console.deps.machine_hold = unreachable
    response = _post(client, f"/api/v1/remediations/{rid}/cancel")
    assert response.status_code == 503, response.text
    assert "nothing was done" in response.json()["reason"]
    assert response.headers["retry-after"] == "3"
    record = console.repository.get(rid)
    assert record is not None and record.state is State.DRAINING
    console.deps.machine_hold = None
    assert _post(client, f"/api/v1/remediations/{rid}/cancel").status_code == 200


def test_command_on_missing_remediation_is_404(client: TestClient) -> None:
    assert _post(client, "/api/v1/remediations/424242/cancel").status_code == 404


def test_pause_resume_and_breaker(client: TestClient, console: Console) -> None:
    paused = _post(client, "/api/v1/controller/pause", {"reason": "maintenance"})
    assert paused.status_code == 200
    assert paused.json()["paused"] is True
    assert paused.json()["paused_by"] == f"operator token {fingerprint(OPERATOR_TOKEN)}"
    assert _post(client, "/api/v1/controller/pause", {"reason": "again"}).status_code == 409
    assert "Automation is paused" in client.get("/", headers=READONLY).text
    assert _post(client, "/api/v1/controller/resume", {"reason": "done"}).json()["paused"] is False

    refused = _post(client, "/api/v1/controller/reset-breaker", {"reason": "x"})
    assert refused.status_code == 409
    console.repository.trip_breaker(reason="12 nodes faulted in 5 minutes")
    reset = _post(client, "/api/v1/controller/reset-breaker", {"reason": "rack power fixed"})
    assert reset.json()["breaker_tripped"] is False
    assert reset.json()["breaker_reset_reason"] == "rack power fixed"
    assert _post(client, "/api/v1/controller/pause", {}).status_code == 422


# -- authentication and CSRF on every mutating route -------------------------------------------


def _routes(routes: list[Any]) -> Iterator[APIRoute]:
    """Every route, including those of included routers (newer FastAPI keeps them nested; our
    routers carry their prefix themselves, so each path is already whole)."""
    for route in routes:
        nested = getattr(route, "original_router", None)
        if nested is not None:
            yield from _routes(nested.routes)
        elif isinstance(route, APIRoute):
            yield route


def _mutating_paths(console: Console) -> list[tuple[str, str]]:
    paths = []
    for route in _routes(console.app.routes):
        methods = (route.methods or set()) & {"POST", "PUT", "PATCH", "DELETE"}
        if methods:
            if route.path in ("/login", "/backtest"):
                continue  # logging in, and rendering an uploaded backtest report, change nothing
            path = route.path.replace("{remediation_id}", str(console.ids["approval"]))
            path = path.replace("{command}", "approve").replace("{opt_out_id}", "1")
            path = path.replace("{ref}", "1").replace("{machine_id}", "machine-1")
            path = path.replace("{node}", "gpu-node-01")
            assert "{" not in path, path
            paths.append((min(methods), path))
    return paths


def test_every_mutating_route_needs_an_operator(client: TestClient, console: Console) -> None:
    paths = _mutating_paths(console)
    assert len(paths) >= 12  # 4 + 3 API commands, 2 push, 2 forms, logout
    for method, path in paths:
        anonymous = client.request(method, path, json={}, follow_redirects=False)
        assert anonymous.status_code == 401, path
        if path.startswith("/api/"):
            assert anonymous.json()["reason"].startswith("authentication required")
            assert anonymous.headers["www-authenticate"] == "Bearer"
        wrong = client.request(method, path, json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401, path
        if path == "/logout":
            continue  # reading is enough to log yourself out
        read_only = client.request(method, path, json={}, headers=READONLY, follow_redirects=False)
        assert read_only.status_code == 403, path
    record = console.repository.get(console.ids["approval"])
    assert record is not None and record.state is State.AWAITING_APPROVAL


def test_reads_need_a_token(reader: TestClient, shared_console: Console) -> None:
    for path in ("/api/v1/remediations", "/api/v1/policies", "/api/v1/nodes/gpu-node-01"):
        assert reader.get(path).status_code == 401
    page = reader.get("/remediations?state=held", follow_redirects=False)
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2Fremediations%3Fstate%3Dheld"


def _login(client: TestClient, token: str) -> str:
    """Logs in; returns the CSRF token the pages carry for this session."""
    response = client.post(
        "/login", data={"token": token, "name": "carol", "next": "/"}, follow_redirects=False
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/"
    cookie = response.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    assert token not in cookie, "the cookie is an opaque session id, never the token"
    return csrf.token_for(client.cookies[SESSION_COOKIE])


def test_forms_need_the_csrf_token(client: TestClient, console: Console) -> None:
    token = _login(client, OPERATOR_TOKEN)
    rid = console.ids["approval"]
    forged = client.post(f"/remediations/{rid}/approve", data={"reason": "x"})
    assert forged.status_code == 403
    assert "CSRF" in forged.text
    wrong = client.post(
        f"/remediations/{rid}/approve", data={"reason": "x", "csrf_token": "0" * 64}
    )
    assert wrong.status_code == 403
    page = client.get(f"/remediations/{rid}")
    assert f'value="{token}"' in page.text
    done = client.post(
        f"/remediations/{rid}/approve",
        data={"reason": "ok", "csrf_token": token},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"/remediations/{rid}?done=approve"
    last = console.repository.get(rid).events[-1]  # type: ignore[union-attr]
    assert last.actor.startswith("carol (operator token")


def test_api_with_the_cookie_needs_the_csrf_header(client: TestClient, console: Console) -> None:
    token = _login(client, OPERATOR_TOKEN)
    path = f"/api/v1/remediations/{console.ids['draining']}/cancel"
    assert client.post(path).status_code == 403
    ok = client.post(path, headers={csrf.HEADER: token})
    assert ok.status_code == 200


def test_login_refuses_unknown_tokens_and_foreign_redirects(client: TestClient) -> None:
    refused = client.post("/login", data={"token": "guess"}, follow_redirects=False)
    assert refused.status_code == 401
    assert SESSION_COOKIE not in refused.headers.get("set-cookie", "")
    bounced = client.post(
        "/login",
        data={"token": READONLY_TOKEN, "next": "//evil.example/x"},
        follow_redirects=False,
    )
    assert bounced.headers["location"] == "/"


def test_form_refusal_renders_the_reason(client: TestClient, console: Console) -> None:
    token = _login(client, OPERATOR_TOKEN)
    response = client.post(
        f"/remediations/{console.ids['done']}/cancel",
        data={"csrf_token": token, "confirm": "yes"},
    )
    assert response.status_code == 409
    assert "already finished" in response.text


def test_cancel_from_a_page_needs_the_confirmation(client: TestClient, console: Console) -> None:
    token = _login(client, OPERATOR_TOKEN)
    rid = console.ids["draining"]
    assert 'name="confirm" value="yes" required' in client.get(f"/remediations/{rid}").text
    form = {"csrf_token": token}
    unconfirmed = client.post(f"/remediations/{rid}/cancel", data=form)
    assert unconfirmed.status_code == 422
    assert "confirmation" in unconfirmed.text
    assert console.repository.get(rid).state is State.DRAINING  # type: ignore[union-attr]
    confirmed = client.post(
        f"/remediations/{rid}/cancel", data={**form, "confirm": "yes"}, follow_redirects=False
    )
    assert confirmed.status_code == 303
    assert console.repository.get(rid).state is State.CANCELLED  # type: ignore[union-attr]


# -- push, probes, metrics, docs ----------------------------------------------------------------


def test_push_signals_and_alertmanager(client: TestClient, console: Console) -> None:
    at = console.clock.now().isoformat()  # a reading older than 5 minutes would be refused
    signal = {"node": "gpu-node-09", "kind": "xid", "source": "ops", "observed_at": at, "code": 79}
    assert client.post("/api/v1/signals", json=[signal], headers=READONLY).status_code == 403
    accepted = client.post("/api/v1/signals", json=[signal], headers=OPERATOR)
    assert accepted.status_code == 202
    webhook = {
        "version": "4",
        "status": "firing",
        "receiver": "remediator",
        "groupKey": "{}:{}",
        "truncatedAlerts": 0,
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": "GPUFellOffTheBus", "node": "gpu-node-10", "gpu": "1"},
                "annotations": {},
                "startsAt": at,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus",
                "fingerprint": "abc",
            }
        ],
    }
    hooked = client.post("/api/v1/alertmanager", json=webhook, headers=OPERATOR)
    assert hooked.status_code == 200, hooked.text
    drained = console.deps.inbox.drain()
    assert [(s.node, s.code) for s in drained] == [("gpu-node-09", 79), ("gpu-node-10", 79)]


def test_probes(client: TestClient, console: Console) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "problems": [], "sources_down": []}
    assert client.get("/readyz").status_code == 200
    console.probes.cluster_problem = "connection refused"
    assert client.get("/readyz").status_code == 200  # only the leader needs the cluster
    console.probes.leader = True
    unready = client.get("/readyz")
    assert unready.status_code == 503
    assert unready.json()["problems"] == ["cluster unreachable: connection refused"]


def test_readyz_without_a_database(console: Console) -> None:
    engine = db.make_engine("postgresql://nobody@127.0.0.1:1/none")
    deps = WebDeps(
        settings=console.deps.settings,
        repository=Repository(db.make_session_factory(engine), "test"),
        policies=console.policies,
        inbox=SignalInbox(),
        registry=CollectorRegistry(),
    )
    with TestClient(create_app(deps)) as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["problems"][0].startswith("database unreachable")


def test_metrics_count_commands(client: TestClient, console: Console) -> None:
    _post(client, f"/api/v1/remediations/{console.ids['approval']}/approve")
    _post(client, f"/api/v1/remediations/{console.ids['approval']}/approve")
    text = client.get("/metrics").text
    assert re.search(
        r'remediator_console_commands_total\{command="approve",outcome="done"\} 1\.0', text
    )
    assert re.search(
        r'remediator_console_commands_total\{command="approve",outcome="refused"\} 1\.0', text
    )


def test_openapi_documents_the_api(reader: TestClient) -> None:
    spec = reader.get("/api/v1/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/api/v1/remediations",
        "/api/v1/remediations/{remediation_id}",
        "/api/v1/remediations/{remediation_id}/approve",
        "/api/v1/nodes/{name}",
        "/api/v1/policies",
        "/api/v1/signals",
        "/api/v1/alertmanager",
        "/api/v1/controller/pause",
    ):
        assert path in paths, path
    assert "/remediations" not in paths  # pages stay out of the API's schema
    assert reader.get("/api/docs").status_code == 200


def test_control_characters_are_refused_not_stored(reader: TestClient) -> None:
    """PostgreSQL refuses NUL in text: without the guard these would be 500s."""
    assert reader.get("/api/v1/nodes/a%00b", headers=READONLY).status_code == 422
    assert reader.get("/api/v1/remediations?q=a%00b", headers=READONLY).status_code == 422
    response = reader.post(
        "/api/v1/remediations/1/approve", json={"reason": "a\u0000b"}, headers=OPERATOR
    )
    assert response.status_code == 422
    assert response.json()["reason"] == "malformed request"
    assert reader.get("/nodes/a%00b", headers=READONLY).status_code == 422
    page = reader.get("/remediations?q=a%00b", headers=READONLY)
    assert page.status_code == 200
    assert "q: not a usable value" in page.text


def test_out_of_range_numbers_and_times_are_refused(reader: TestClient) -> None:
    huge = "/remediations/99999999999999999999"
    assert reader.get(huge, headers=READONLY).status_code == 422
    assert reader.get("/api/v1" + huge, headers=READONLY).status_code == 422
    assert reader.get("/api/v1/remediations?xid=4294967296", headers=READONLY).status_code == 422
    early = "created_from=0001-01-01T00:00:00%2B14:00"
    response = reader.get(f"/api/v1/remediations?{early}", headers=READONLY)
    assert response.status_code == 422
    assert "out of range" in response.json()["reason"]
    page = reader.get("/remediations?from=0001-01-01T00:00:00%2B14:00", headers=READONLY)
    assert "from: not a date or time" in page.text


def test_pages_cannot_be_framed_or_load_foreign_code(reader: TestClient) -> None:
    page = reader.get("/", headers=READONLY)
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    # The API docs too: Swagger UI comes from the installed package, started by our own file.
    docs = reader.get("/api/docs").headers["content-security-policy"]
    assert docs == page.headers["content-security-policy"]


def test_every_page_renders(reader: TestClient, shared_console: Console) -> None:
    for path in (
        "/",
        "/remediations",
        "/remediations?state=held&q=node&xid=79&from=2026-01-10&to=2026-01-11T00:00",
        f"/remediations/{shared_console.ids['done']}",
        f"/remediations/{shared_console.ids['held']}",
        "/nodes/gpu-node-01",
        "/nodes/never-seen",
        "/policies",
        "/runbooks",
        "/runbooks/drain-stuck-pdb",
    ):
        response = reader.get(path, headers=READONLY)
        assert response.status_code == 200, path
    assert reader.get("/runbooks/..%2Fpyproject", headers=READONLY).status_code == 404
    assert reader.get("/remediations/9999", headers=READONLY).status_code == 404
    bad = reader.get("/remediations?xid=abc&state=bogus", headers=READONLY)
    assert bad.status_code == 200
    assert "XID must be a number" in bad.text and "unknown state" in bad.text


def test_after_a_resume_the_controller_reports_the_resume_not_the_pause(
    client: TestClient,
) -> None:
    assert _post(client, "/api/v1/controller/pause", {"reason": "maintenance"}).status_code == 200
    resumed = _post(client, "/api/v1/controller/resume", {"reason": "maintenance done"})
    assert resumed.status_code == 200
    for body in (resumed.json(), client.get("/api/v1/controller", headers=READONLY).json()):
        assert body["paused"] is False
        assert body["pause_reason"] is None and body["paused_by"] is None, body
        assert body["paused_at"] is None
        assert body["resume_reason"] == "maintenance done"
        assert body["resumed_by"] == f"operator token {fingerprint(OPERATOR_TOKEN)}"
        assert body["resumed_at"] is not None
    overview = client.get("/api/v1/overview", headers=READONLY).json()["controller"]
    assert overview["pause_reason"] is None and overview["resume_reason"] == "maintenance done"


def test_a_cancel_on_a_quarantined_machine_answers_that_its_node_stays_fenced(
    client: TestClient, console: Console
) -> None:
    rid = console.ids["draining"]
    before = console.repository.get(rid)
    assert before is not None
    held = "quarantined machine aws:i-0abc: replaced 3 times within 30 days"
    console.deps.machine_hold = lambda node: held if node == before.node else None
    response = _post(client, f"/api/v1/remediations/{rid}/cancel")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "cancelled"
    assert body["hold_reason"] == f"{before.node} stays fenced: {held}"
    record = console.repository.get(rid)
    assert record is not None
    assert record.events[-1].detail["kept_fenced"] == {before.node: held}
