"""The doctor's database and agent checks on a real SQLite file, opened read-only: migrations at
head, agents counted with their versions and silences; a file that is not there is a failure and
is not created."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from remediator.clock import FakeClock, utcnow
from remediator.doctor.context import DoctorContext
from remediator.doctor.report import Status
from remediator.doctor.systems import agents, database
from remediator.settings import Settings
from remediator.store.db import make_engine, make_session_factory, upgrade
from remediator.store.records import AgentStatus
from remediator.store.repository import Repository


def context(url: str) -> DoctorContext:
    return DoctorContext(Settings(database_url=url, kubeconfig=Path("/nonexistent")), 5.0)


def test_database_and_agents(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    clock = FakeClock(utcnow() - timedelta(minutes=10))
    engine = make_engine(url)
    repo = Repository(make_session_factory(engine), "default", clock)
    first = clock.now()
    clock.advance(600)
    repo.record_heartbeats(
        [
            AgentStatus("n1", "a", "0.1.0", started_at=first, seen_at=first),
            AgentStatus("n2", "a", "0.2.0", started_at=clock.now(), seen_at=clock.now()),
        ]
    )
    engine.dispose()

    reachable, migrations = database(context(url))
    assert reachable.status is Status.PASS and migrations.status is Status.PASS

    (reporting,) = agents(context(url))
    assert reporting.status is Status.WARN
    assert reporting.found.startswith("2 agents of an unknown number of GPU nodes")
    assert "(0.1.0: 1, 0.2.0: 1)" in reporting.found
    assert "1 silent for over 60s" in reporting.found
    assert "more than one version running" in reporting.found


def test_a_missing_sqlite_file_fails_and_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'absent.db'}"
    (finding,) = database(context(url))
    assert finding.status is Status.FAIL and "does not exist" in finding.found
    assert "db upgrade" in finding.found
    assert not (tmp_path / "absent.db").exists()
