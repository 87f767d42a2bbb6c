"""A controller that loses its database (PostgreSQL refusing connections, as in an outage or a
failover) holds every remediation where it stands, says so once with the reason, and resumes
when the database answers again: the fault that came during the outage is remediated once."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.store.db import make_engine, make_session_factory
from remediator.store.repository import Repository
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.sim import SimHandle
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, build_console
from tests.integration.engine_support import settings_for, write_process_config

pytestmark = pytest.mark.integration


def wait(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _connections(server: PostgresServer, database: str, allowed: bool) -> None:
    with server.admin() as admin:
        admin.execute(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (database,),
            )


def test_a_lost_database_holds_and_the_controller_resumes_when_it_returns(
    sim_factory: Callable[..., SimHandle],
    postgres_server: PostgresServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.2)
    database = postgres_server.migrated_database()
    url = postgres_server.url(database)
    write_process_config(tmp_path, sim, url)  # the node-condition policy
    controller = Controller(settings_for(sim, url, tmp_path / "policies"))
    engine = make_engine(url)
    repo = Repository(make_session_factory(engine), "default")
    node = sim.kubectl("get", "nodes", "-o", "name").split()[0].split("/")[-1]
    caplog.set_level(logging.WARNING, logger="remediator.controller.app")
    try:
        controller.start(serve_web=False)
        _connections(postgres_server, database, allowed=False)
        fault = {"type": "condition", "node": node, "condition": "GpuFallenOffBus"}
        fault["status"] = "True"
        assert httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10).status_code == 200
        wait(lambda: controller.database.down is not None, "the controller to notice")
        assert "OperationalError" in (controller.database.down or "")
        said = [r.getMessage() for r in caplog.records if "database unreachable" in r.getMessage()]
        assert len(said) == 1 and "every remediation holds where it stands" in said[0]
        shown = json.loads(sim.kubectl("get", "node", node, "-o", "json"))
        assert not shown["spec"].get("unschedulable"), "nothing acts without its record"

        _connections(postgres_server, database, allowed=True)
        wait(lambda: controller.database.down is None, "the controller to resume")
        assert any("database answers again" in r.getMessage() for r in caplog.records)

        def done() -> bool:
            found = repo.node_history(node).remediations
            return bool(found) and found[0].state is State.SUCCEEDED

        wait(done, "the fault of the outage to be remediated", timeout=180)
        (record,) = repo.node_history(node).remediations
        full = repo.get(record.id)
        assert full is not None
        moves = [e.to_state for e in full.events if e.to_state is not None]
        assert moves.count(State.REPLACING) == 1 and moves[-1] is State.SUCCEEDED
    finally:
        _connections(postgres_server, database, allowed=True)
        controller.stop()
        engine.dispose()


def test_the_consoles_api_answers_503_with_retry_after_while_the_database_is_down(
    postgres_server: PostgresServer,
) -> None:
    """As the fleet console does: a reader and an operator are told the database is down and
    when to retry, never a 500 with a traceback."""
    database = postgres_server.migrated_database()
    console = build_console(postgres_server.url(database))
    reader = {"Authorization": f"Bearer {READONLY_TOKEN}"}
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    with TestClient(console.app, raise_server_exceptions=False) as client:
        assert client.get("/api/v1/remediations", headers=reader).status_code == 200
        _connections(postgres_server, database, allowed=False)
        try:
            answers = [
                client.get("/api/v1/remediations", headers=reader),
                client.post("/api/v1/controller/pause", json={"reason": "storm"}, headers=operator),
            ]
            page = client.get("/remediations", headers=reader)
        finally:
            _connections(postgres_server, database, allowed=True)
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "5"
            assert answer.json()["reason"].startswith("database down (OperationalError)")
            assert "Traceback" not in answer.text
        assert page.status_code == 503 and "database down" in page.text
        assert client.get("/api/v1/remediations", headers=reader).status_code == 200
