"""The fleet console over a shared database (SQLite and PostgreSQL): every cluster's figures,
the fleet's "waiting for you", per-cluster pages and commands chosen by cluster, tokens scoped
to clusters, and a database that is down said so."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, text

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.settings import ScopedToken, Settings, WebSettings
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.audit import AuditLog, AuditQuery
from remediator.store.clusters import ClusterRegistry
from remediator.store.fleet_breaker import FleetBreakerStore
from remediator.store.records import NewRemediation
from remediator.store.repository import Repository, quarantine_spans
from remediator.web.auth import fingerprint
from remediator.web.fleet import Fleet, create_fleet_app
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.web import build_console

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
FLEET_OPERATOR = "fleet-operator-token-0123"
A_OPERATOR = "a-operator-token-0123456"
A_READER = "a-readonly-token-0123456"


def _new(node: str, *, approval: bool = False, model: str | None = None) -> NewRemediation:
    labels = {"modelName": model} if model else {}
    signal = Signal(
        node=node,
        kind=SignalKind.XID,
        source="dcgm",
        observed_at=T0,
        gpu=0,
        code=79,
        labels=labels,
    )
    return NewRemediation(
        node=node,
        policy="xid-fatal",
        reason="XID 79 on GPU 0",
        signals=[signal],
        ladder=[{"action": "cordon"}, {"action": "drain", "grace_seconds": 60}],
        pool="train",
        approval_required=approval,
    )


@dataclass
class Shared:
    engine: Engine
    clock: FakeClock
    repos: dict[str, Repository]
    ids: dict[str, int]
    client: TestClient


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def shared(migrated_database_url: str) -> Iterator[Shared]:
    engine = db.make_engine(migrated_database_url)
    clock = FakeClock(T0)
    factory = db.make_session_factory(engine)
    registry = ClusterRegistry(factory, clock)
    repos: dict[str, Repository] = {}
    ids: dict[str, int] = {}
    for name, uid in (("alpha", "uid-a"), ("bravo", "uid-b"), ("charlie", "uid-c")):
        registry.claim(name, uid, by=f"controller {name}-0")
        repos[name] = Repository(factory, name, clock)
    # alpha: one waiting for approval, one in flight; bravo: one held (stuck), breaker tripped.
    a_wait = repos["alpha"].create(_new("a-gpu-1", approval=True), actor="controller alpha-0")
    repos["alpha"].transition(
        a_wait.id,
        State.DETECTED,
        State.AWAITING_APPROVAL,
        action="await_approval",
        actor="controller alpha-0",
    )
    ids["a_wait"] = a_wait.id
    ids["a_flight"] = repos["alpha"].create(_new("a-gpu-2"), actor="controller alpha-0").id
    clock.advance(300)
    b_held = repos["bravo"].create(_new("b-gpu-1"), actor="controller bravo-0")
    bravo = "controller bravo-0"
    repos["bravo"].transition(
        b_held.id, State.DETECTED, State.QUARANTINED, action="cordon", actor=bravo
    )
    repos["bravo"].transition(
        b_held.id,
        State.QUARANTINED,
        State.HELD,
        action="hold",
        actor=bravo,
        hold_reason="drain stuck behind a PodDisruptionBudget",
    )
    ids["b_held"] = b_held.id
    repos["bravo"].trip_breaker(reason="4 faults in 10 min")
    repos["alpha"].record_leader("alpha-0")
    repos["bravo"].record_leader("bravo-0")
    repos["bravo"].record_source_health("prometheus", up=False, error="connection refused")
    clock.advance(60)
    repos["alpha"].record_leader("alpha-0")  # alpha heard from lately, bravo a minute ago
    settings = Settings(
        database_url=migrated_database_url,
        web=WebSettings(
            operator_tokens=[
                SecretStr(FLEET_OPERATOR),
                ScopedToken(token=SecretStr(A_OPERATOR), clusters=["alpha"]),
            ],
            readonly_tokens=[ScopedToken(token=SecretStr(A_READER), clusters=["alpha"])],
        ),
    )
    fleet = Fleet(settings, engine, clock)
    with TestClient(create_fleet_app(fleet)) as client:
        yield Shared(engine, clock, repos, ids, client)
    engine.dispose()


def test_the_clusters_route_lists_every_cluster_with_its_figures(shared: Shared) -> None:
    answer = shared.client.get("/api/v1/clusters", headers=_auth(FLEET_OPERATOR))
    assert answer.status_code == 200, answer.text
    items = {c["name"]: c for c in answer.json()["items"]}
    assert sorted(items) == ["alpha", "bravo", "charlie"]
    alpha, bravo, charlie = items["alpha"], items["bravo"], items["charlie"]
    assert (alpha["in_flight"], alpha["waiting_for_human"], alpha["held"]) == (1, 1, 0)
    assert (bravo["in_flight"], bravo["waiting_for_human"], bravo["held"]) == (0, 0, 1)
    assert (alpha["breaker"], bravo["breaker"]) == ("closed", "tripped")
    assert bravo["sources_down"] == ["prometheus"] and alpha["sources_down"] == []
    assert alpha["controller_problem"] is None
    assert bravo["controller_problem"] == (
        "controller of cluster bravo not seen for 60 s: commands wait until it returns"
    )
    assert charlie["controller_seen_at"] is None and "never seen" in charlie["controller_problem"]


def test_waiting_for_you_spans_the_fleet_most_urgent_first(shared: Shared) -> None:
    answer = shared.client.get("/api/v1/fleet/waiting", headers=_auth(FLEET_OPERATOR))
    assert answer.status_code == 200, answer.text
    rows = [(w["cluster"], w["id"], w["state"]) for w in answer.json()["items"]]
    assert rows == [
        ("bravo", shared.ids["b_held"], "held"),
        ("alpha", shared.ids["a_wait"], "awaiting_approval"),
    ]
    page = shared.client.get("/fleet", headers=_auth(FLEET_OPERATOR))
    assert page.status_code == 200
    assert 'data-cluster="bravo"' in page.text and "drain stuck behind" in page.text


def test_per_cluster_routes_take_the_cluster_from_the_request(shared: Shared) -> None:
    client, auth = shared.client, _auth(FLEET_OPERATOR)
    listed = client.get("/api/v1/remediations?cluster=alpha", headers=auth).json()
    assert {r["node"] for r in listed["items"]} == {"a-gpu-1", "a-gpu-2"}
    listed = client.get("/api/v1/remediations?cluster=bravo", headers=auth).json()
    assert {r["node"] for r in listed["items"]} == {"b-gpu-1"}
    # A remediation names its own cluster.
    detail = client.get(f"/api/v1/remediations/{shared.ids['b_held']}", headers=auth)
    assert detail.status_code == 200 and detail.json()["node"] == "b-gpu-1"
    unchosen = TestClient(client.app).get("/api/v1/remediations", headers=auth)
    assert unchosen.status_code == 400 and "?cluster=NAME" in unchosen.json()["reason"]
    unknown = client.get("/api/v1/remediations?cluster=delta", headers=auth)
    assert unknown.status_code == 404 and "no cluster named delta" in unknown.json()["reason"]
    bad = client.get("/api/v1/remediations?cluster=Not_A_Name", headers=auth)
    assert bad.status_code == 400 and "DNS-1123" in bad.json()["reason"]
    # A browser that chose a cluster keeps it.
    browser = TestClient(client.app)
    assert browser.get("/?cluster=bravo", headers=auth).status_code == 200
    page = browser.get("/remediations", headers=auth)
    assert page.status_code == 200 and "b-gpu-1" in page.text and "a-gpu-1" not in page.text
    assert "controller of cluster bravo not seen for 60 s" in page.text


def test_remediations_from_the_fleet_api_name_their_cluster(shared: Shared) -> None:
    auth = _auth(FLEET_OPERATOR)
    listed = shared.client.get("/api/v1/remediations?cluster=alpha", headers=auth).json()
    assert {r["cluster"] for r in listed["items"]} == {"alpha"}
    detail = shared.client.get(f"/api/v1/remediations/{shared.ids['b_held']}", headers=auth)
    assert detail.json()["cluster"] == "bravo"


def test_an_approve_is_written_for_the_owner_and_audited_under_its_cluster(
    shared: Shared,
) -> None:
    rid = shared.ids["a_wait"]
    answer = shared.client.post(
        f"/api/v1/remediations/{rid}/approve",
        headers=_auth(FLEET_OPERATOR) | {"X-Remediator-Actor": "ana"},
        json={"reason": "checked the node"},
    )
    assert answer.status_code == 200, answer.text
    record = shared.repos["alpha"].get(rid)
    assert record is not None and record.state is State.QUARANTINED
    factory = db.make_session_factory(shared.engine)
    alpha_audit = AuditLog(factory, "alpha", shared.clock).list(AuditQuery())
    assert [(a.command, a.outcome, a.remediation_id) for a in alpha_audit] == [
        ("approve", "done", rid)
    ]
    assert AuditLog(factory, "bravo", shared.clock).list(AuditQuery()) == ()


def test_a_token_scoped_to_a_cluster_is_refused_elsewhere(shared: Shared) -> None:
    client = shared.client
    for token in (A_OPERATOR, A_READER):
        auth = _auth(token)
        assert client.get("/api/v1/remediations?cluster=alpha", headers=auth).status_code == 200
        refused = client.get("/api/v1/remediations?cluster=bravo", headers=auth)
        assert refused.status_code == 403 and "not for cluster bravo" in refused.json()["reason"]
        by_id = client.get(f"/api/v1/remediations/{shared.ids['b_held']}", headers=auth)
        assert by_id.status_code == 403
        audit = client.get("/api/v1/audit?cluster=bravo", headers=auth)
        assert audit.status_code == 403
        names = [c["name"] for c in client.get("/api/v1/clusters", headers=auth).json()["items"]]
        assert names == ["alpha"]
        waiting = client.get("/api/v1/fleet/waiting", headers=auth).json()["items"]
        assert {w["cluster"] for w in waiting} == {"alpha"}
    release = client.post(
        f"/api/v1/remediations/{shared.ids['b_held']}/release",
        headers=_auth(A_OPERATOR),
        json={"reason": "not mine"},
    )
    assert release.status_code == 403
    record = shared.repos["bravo"].get(shared.ids["b_held"])
    assert record is not None and record.state is State.HELD


def test_the_fleet_console_takes_no_signals(shared: Shared) -> None:
    answer = shared.client.post(
        "/api/v1/signals?cluster=alpha",
        headers=_auth(FLEET_OPERATOR),
        json={"signals": []},
    )
    assert answer.status_code in (400, 422, 503)


def test_a_database_that_is_down_is_said_so_not_shown_empty(
    shared: Shared, request: pytest.FixtureRequest
) -> None:
    client = shared.client
    assert client.get("/api/v1/clusters", headers=_auth(FLEET_OPERATOR)).status_code == 200
    if shared.engine.dialect.name == "sqlite":
        pytest.skip("a SQLite file does not go down the way a database server does")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    database = shared.engine.url.database
    with server.admin() as admin:
        # The database refuses connections and the console's are cut, as in an outage.
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (database,),
        )
    try:
        answer = client.get("/api/v1/clusters", headers=_auth(FLEET_OPERATOR))
        assert answer.status_code == 503 and "database down" in answer.json()["reason"]
        page = client.get("/remediations?cluster=alpha", headers=_auth(FLEET_OPERATOR))
        assert page.status_code == 503 and "database down" in page.text
    finally:
        with server.admin() as admin:
            admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')
    assert client.get("/api/v1/clusters", headers=_auth(FLEET_OPERATOR)).status_code == 200


def test_fleet_figures_per_cluster_pool_and_model_as_json_csv_and_page(shared: Shared) -> None:
    alpha = shared.repos["alpha"]
    h100 = "NVIDIA H100 80GB HBM3"
    done = alpha.create(_new("a-gpu-3", model=h100), actor="controller alpha-0")
    alpha.transition(done.id, State.DETECTED, State.QUARANTINED, action="cordon", actor="c")
    shared.clock.advance(1800)
    alpha.transition(
        done.id,
        State.QUARANTINED,
        State.SUCCEEDED,
        action="replaced",
        actor="c",
        detail={"gpus": 8},
        outcome="replaced",
    )
    auth = _auth(FLEET_OPERATOR)
    answer = shared.client.get("/api/v1/fleet/figures?days=7", headers=auth)
    assert answer.status_code == 200, answer.text
    rows = {(r["cluster"], r["pool"], r["gpu_model"]): r for r in answer.json()["rows"]}
    assert set(rows) == {
        ("alpha", "train", "unknown"),
        ("alpha", "train", h100),
        ("bravo", "train", "unknown"),
    }
    replaced = rows[("alpha", "train", h100)]
    assert (replaced["faults"], replaced["replaced"], replaced["spares_used"]) == (1, 1, 1)
    assert replaced["repair_median_seconds"] == replaced["repair_p90_seconds"] == 1800.0
    assert replaced["gpu_hours_out_of_service"] == 4.0  # 8 GPUs for half an hour
    assert rows[("alpha", "train", "unknown")]["faults"] == 2
    assert rows[("bravo", "train", "unknown")]["breaker_trips"] == 1
    assert sum(d["faults"] for d in answer.json()["daily"]) == 4
    csv_text = shared.client.get("/api/v1/fleet/figures.csv?days=7", headers=auth)
    assert csv_text.status_code == 200 and csv_text.headers["content-type"].startswith("text/csv")
    lines = csv_text.text.splitlines()
    assert lines[0].startswith("cluster,pool,gpu_model,faults,repaired,replaced")
    assert f"alpha,train,{h100},1,0,1,1,1800.0,1800.0,4.0,0.0,0,0" in lines
    only = shared.client.get("/api/v1/fleet/figures?cluster=bravo", headers=auth).json()
    assert {r["cluster"] for r in only["rows"]} == {"bravo"}
    page = shared.client.get("/fleet/figures", headers=auth)
    assert page.status_code == 200 and "<svg" in page.text and h100 in page.text
    scoped = shared.client.get("/api/v1/fleet/figures?cluster=bravo", headers=_auth(A_READER))
    assert scoped.status_code == 403
    mine = shared.client.get("/api/v1/fleet/figures.csv", headers=_auth(A_READER)).text
    assert "bravo" not in mine and "alpha" in mine


def test_a_clusters_own_console_refuses_a_token_scoped_to_another(
    migrated_database_url: str,
) -> None:
    console = build_console(migrated_database_url)
    web = console.deps.settings.web
    web.operator_tokens.append(ScopedToken(token=SecretStr(A_OPERATOR), clusters=["alpha"]))
    web.readonly_tokens.append(ScopedToken(token=SecretStr(A_READER), clusters=["test"]))
    with TestClient(console.app) as client:
        refused = client.get("/api/v1/remediations", headers=_auth(A_OPERATOR))
        assert refused.status_code == 403 and "not for cluster test" in refused.json()["reason"]
        assert client.get("/", headers=_auth(A_OPERATOR)).status_code == 403
        assert client.get("/api/v1/remediations", headers=_auth(A_READER)).status_code == 200


def test_a_months_spans_beyond_a_statements_parameter_limit(
    postgres_server: PostgresServer,
) -> None:
    """70,000 quarantines in the window: more ids than PostgreSQL takes parameters (65,535)."""
    engine = db.make_engine(postgres_server.url(postgres_server.migrated_database()))
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO remediations (cluster, node, policy, policy_priority, state, "
                    "dry_run, approval_required, reason, signal_kind, signals, ladder, "
                    "step_index, idempotency_key, attempts, version, created_at, updated_at) "
                    "SELECT 'c' || (i % 2), 'n' || i, 'p', 0, 'succeeded', false, false, 'r', "
                    "'xid', '[]', '[]', 0, md5(i::text), 0, 1, :at, :at "
                    "FROM generate_series(1, 70000) AS i"
                ),
                {"at": T0},
            )
            conn.execute(
                text(
                    "INSERT INTO remediation_events (remediation_id, cluster, at, from_state, "
                    "to_state, action, detail, actor) SELECT id, cluster, :at, 'detected', "
                    "'quarantined', 'cordon', '{}', 'c' FROM remediations"
                ),
                {"at": T0},
            )
        spans = quarantine_spans(db.make_session_factory(engine), ("c0", "c1"), T0)
        assert len(spans) == 70_000
    finally:
        engine.dispose()


def test_a_command_shows_pending_until_the_owning_leader_acts_and_names_a_silent_one(
    shared: Shared,
) -> None:
    """alpha's controller was seen just now, bravo's a minute ago (past the 30 s bound)."""
    approve = shared.ids["a_wait"]
    asked = shared.client.post(
        f"/api/v1/remediations/{approve}/approve",
        headers=_auth(FLEET_OPERATOR) | {"X-Remediator-Actor": "ana"},
        json={"reason": "checked"},
    )
    assert asked.status_code == 200, asked.text
    pending = shared.client.get(f"/api/v1/remediations/{approve}", headers=_auth(FLEET_OPERATOR))
    found = pending.json()["pending"]
    assert found["command"] == "approve" and found["asked_by"].startswith("ana (operator token")
    assert found["controller_problem"] is None
    page = shared.client.get(f"/remediations/{approve}", headers=_auth(FLEET_OPERATOR))
    assert 'class="badge wait">pending</span> approve by ana' in page.text
    assert "waiting for the controller of cluster alpha" in page.text

    # alpha's leader carries it out: its next step ends the pending badge.
    shared.repos["alpha"].transition(
        approve, State.QUARANTINED, State.DRAINING, action="drain", actor="controller alpha-0"
    )
    after = shared.client.get(f"/api/v1/remediations/{approve}", headers=_auth(FLEET_OPERATOR))
    assert after.json()["pending"] is None
    page = shared.client.get(f"/remediations/{approve}", headers=_auth(FLEET_OPERATOR))
    assert "pending-command" not in page.text

    # bravo's controller is silent: the command waits, and the console says why.
    held = shared.ids["b_held"]
    released = shared.client.post(
        f"/api/v1/remediations/{held}/release", headers=_auth(FLEET_OPERATOR), json={}
    )
    assert released.status_code == 200, released.text
    shown = shared.client.get(f"/api/v1/remediations/{held}", headers=_auth(FLEET_OPERATOR))
    assert shown.json()["pending"]["controller_problem"] == (
        "controller of cluster bravo not seen for 60 s: commands wait until it returns"
    )
    page = shared.client.get(f"/remediations/{held}", headers=_auth(FLEET_OPERATOR))
    assert "controller of cluster bravo not seen for 60 s" in page.text


def test_a_clusters_pause_is_pending_in_the_overview_until_its_controller_is_seen(
    shared: Shared,
) -> None:
    asked = shared.client.post(
        "/api/v1/controller/pause?cluster=alpha",
        headers=_auth(FLEET_OPERATOR) | {"X-Remediator-Actor": "ana"},
        json={"reason": "driver rollout"},
    )
    assert asked.status_code == 200, asked.text
    shared.clock.advance(5)
    rows = {
        c["name"]: c
        for c in shared.client.get("/api/v1/clusters", headers=_auth(FLEET_OPERATOR)).json()[
            "items"
        ]
    }
    assert rows["alpha"]["pending_command"].startswith("pause by ana (operator token ")
    assert rows["alpha"]["pending_command"].endswith(
        " 5 s ago: waiting for the controller of cluster alpha"
    )
    assert rows["bravo"]["pending_command"] is None
    page = shared.client.get("/fleet", headers=_auth(FLEET_OPERATOR))
    assert "pending: pause by ana" in page.text

    shared.repos["alpha"].record_leader("alpha-0")  # its next cycle: it has seen the pause
    rows = {
        c["name"]: c
        for c in shared.client.get("/api/v1/clusters", headers=_auth(FLEET_OPERATOR)).json()[
            "items"
        ]
    }
    assert rows["alpha"]["pending_command"] is None


def test_commands_refused_for_a_tokens_cluster_scope_are_audited_under_that_cluster(
    shared: Shared,
) -> None:
    """A token scoped to alpha asking for bravo's pause, cancel or breaker reset is refused
    (403) and each refusal is a row of bravo's audit log, as the docs promise of every refused
    command."""
    client, held = shared.client, shared.ids["b_held"]
    alice = _auth(A_OPERATOR) | {"X-Remediator-Actor": "alice"}
    asks = (
        ("/api/v1/controller/pause?cluster=bravo", {"reason": "not my cluster"}),
        (f"/api/v1/remediations/{held}/cancel", {"reason": "looks stuck"}),
        ("/api/v1/controller/reset-breaker?cluster=bravo", {"reason": "storm over"}),
    )
    for path, body in asks:
        answer = client.post(path, headers=alice, json=body)
        assert answer.status_code == 403, answer.text
    bravo = AuditLog(db.make_session_factory(shared.engine), "bravo", shared.clock)
    rows = bravo.list(AuditQuery())
    assert [(a.command, a.outcome, a.remediation_id, a.reason) for a in rows] == [
        ("reset-breaker", "refused", None, "storm over"),
        ("cancel", "refused", held, "looks stuck"),
        ("pause", "refused", None, "not my cluster"),
    ]
    for row in rows:
        assert row.actor == f"alice (operator token {fingerprint(A_OPERATOR)})"
        assert row.detail == "your token is not for cluster bravo"
    state = shared.repos["bravo"].controller_status()
    assert not state.paused and state.breaker_tripped


def _fleet_breaker_over(shared: Shared, *taking_part: str) -> FleetBreakerStore:
    """The fleet breaker, with these clusters taking part (their controllers report a size)."""
    store = FleetBreakerStore(db.make_session_factory(shared.engine), shared.clock)
    for cluster in taking_part:
        store.record(cluster, 10, (), T0, shared.clock.now())
    return store


def test_under_a_tripped_fleet_breaker_fleet_shows_queued_work_and_the_stop(
    shared: Shared,
) -> None:
    """Work the fleet breaker queued is queued, not in flight; a taking-part cluster whose own
    breaker is closed is shown stopped by the fleet breaker, not "closed"."""
    store = _fleet_breaker_over(shared, "alpha", "bravo")
    store.trip(reason="12 of 20 fleet nodes newly faulted", by_cluster="bravo")
    held = "fleet breaker tripped: 12 of 20 fleet nodes newly faulted"
    shared.repos["alpha"].create(
        _new("a-gpu-7"), actor="controller alpha-0", queued="breaker", hold_reason=held
    )
    auth = _auth(FLEET_OPERATOR)
    items = {
        c["name"]: c for c in shared.client.get("/api/v1/clusters", headers=auth).json()["items"]
    }
    alpha, bravo, charlie = items["alpha"], items["bravo"], items["charlie"]
    assert (alpha["in_flight"], alpha["queued"]) == (1, 1)
    assert (alpha["breaker"], alpha["fleet_breaker_holds"]) == ("closed", True)
    assert (bravo["breaker"], bravo["fleet_breaker_holds"]) == ("tripped", True)
    assert (charlie["breaker"], charlie["fleet_breaker_holds"]) == ("closed", False)
    page = shared.client.get("/fleet", headers=auth).text
    row = page.split('<tr data-cluster="alpha">')[1].split("</tr>")[0]
    assert 'data-label="queued">1<' in row and 'data-label="in flight">1<' in row
    assert "stopped by the fleet breaker" in row and ">closed<" not in row
    charlie_row = page.split('<tr data-cluster="charlie">')[1].split("</tr>")[0]
    assert ">closed<" in charlie_row


def test_fleet_figures_count_fleet_breaker_trips_of_the_clusters_taking_part(
    shared: Shared,
) -> None:
    """One trip a human reset and one standing now, for each cluster that takes part."""
    store = _fleet_breaker_over(shared, "alpha", "bravo")
    auth = _auth(FLEET_OPERATOR)
    store.trip(reason="a storm", by_cluster="alpha")
    reset = shared.client.post(
        "/api/v1/fleet/breaker/reset", headers=auth, json={"reason": "a bad driver, rolled back"}
    )
    assert reset.status_code == 200, reset.text
    again = shared.client.post(
        "/api/v1/fleet/breaker/reset", headers=auth, json={"reason": "not tripped: no trip"}
    )
    assert again.status_code == 200, again.text
    shared.clock.advance(60)
    store.trip(reason="another storm", by_cluster="bravo")
    rows = shared.client.get("/api/v1/fleet/figures?days=7", headers=auth).json()["rows"]
    trips = {r["cluster"]: (r["breaker_trips"], r["fleet_breaker_trips"]) for r in rows}
    assert trips == {"alpha": (0, 2), "bravo": (1, 2)}
    csv_text = shared.client.get("/api/v1/fleet/figures.csv?days=7", headers=auth).text
    assert csv_text.splitlines()[0].endswith(",breaker_trips,fleet_breaker_trips")
