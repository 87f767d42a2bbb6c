from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import StatementError

from remediator.cli import main
from remediator.errors import RemediatorError
from remediator.store import db
from remediator.store.models import ControllerState


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@h:5432/d", "postgresql+psycopg://u:p@h:5432/d"),
        ("postgres://u@h/d", "postgresql+psycopg://u@h/d"),
        ("postgresql+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),
        ("sqlite:///x.db", "sqlite:///x.db"),
    ],
)
def test_normalise_url_picks_psycopg3(given: str, expected: str) -> None:
    assert db.normalise_url(given).render_as_string(hide_password=False) == expected


def test_make_engine_refuses_other_backends() -> None:
    with pytest.raises(RemediatorError, match="unsupported"):
        db.make_engine("mysql://u@h/d")


def test_an_unparsable_url_is_a_clear_error_that_keeps_the_password_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(RemediatorError, match="cannot be parsed"):
        db.make_engine("postgresql//admin:hunter2@db/remediator")
    assert main(["db", "check", "--database-url", "postgresql//admin:hunter2@db/r"]) == 1
    err = capsys.readouterr().err
    assert "remediator db check: the database URL cannot be parsed" in err
    assert "hunter2" not in err and "Traceback" not in err


def test_sqlite_engine_pragmas(tmp_path: Path) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == db.SQLITE_BUSY_TIMEOUT_MS
    finally:
        engine.dispose()


def test_sqlite_timestamps_come_back_aware_utc(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    factory = db.make_session_factory(engine)
    local = datetime(2026, 3, 1, 14, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    try:
        with db.session_scope(factory, write=True) as session:
            session.add(ControllerState(cluster="c", updated_at=local, paused_at=None))
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT updated_at FROM controller_state")).scalar()
        assert stored == "2026-03-01 12:30:15.123456"
        with db.session_scope(factory) as session:
            row = session.get(ControllerState, "c")
            assert row is not None
            assert row.updated_at == local
            assert row.updated_at.tzinfo is UTC
            assert row.paused_at is None
    finally:
        engine.dispose()


def test_naive_datetimes_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    factory = db.make_session_factory(engine)
    try:
        with (
            pytest.raises(StatementError, match="naive datetime"),
            db.session_scope(factory, write=True) as session,
        ):
            session.add(ControllerState(cluster="c", updated_at=datetime(2026, 1, 1)))
    finally:
        engine.dispose()


def test_session_scope_rolls_back_on_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    factory = db.make_session_factory(engine)
    try:
        with pytest.raises(RuntimeError), db.session_scope(factory, write=True) as session:
            session.add(ControllerState(cluster="c", updated_at=datetime.now(UTC)))
            session.flush()
            raise RuntimeError("boom")
        with db.session_scope(factory) as session:
            assert session.get(ControllerState, "c") is None
    finally:
        engine.dispose()


def test_migrations_dir_honours_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (db.migrations_dir() / "versions").is_dir()
    (tmp_path / "env.py").write_text("")
    monkeypatch.setenv(db.MIGRATIONS_ENV, str(tmp_path))
    assert db.migrations_dir() == tmp_path
    monkeypatch.setenv(db.MIGRATIONS_ENV, str(tmp_path / "missing"))
    assert db.migrations_dir() != tmp_path / "missing"


def test_check_reports_an_unmigrated_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(db.StoreUnavailable, match="run db upgrade"):
        db.check(url)
    db.upgrade(url)
    db.check(url)


def test_the_code_s_schema_head_is_the_migrations_head() -> None:
    assert db.head_revision() == db.SCHEMA_HEAD, "a new migration: set db.SCHEMA_HEAD to it"


def test_check_names_the_revision_found_one_behind_and_upgrade_clears_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.raises(db.StoreUnavailable, match=r"at revision None, expected"):
        db.check(url)
    db.upgrade(url)
    previous = db.head_revision()
    db.downgrade(url, "-1")
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            below = db.schema_revision(conn)
    finally:
        engine.dispose()
    assert below is not None and below != previous
    with pytest.raises(db.StoreUnavailable, match=f"at revision {below}, expected {previous}"):
        db.check(url)
    db.upgrade(url)
    db.check(url)


def test_the_start_up_check_runs_without_loading_alembic(tmp_path: Path) -> None:
    """alembic stays out of the controller's resident memory: it is needed only to migrate."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    db.upgrade(url)
    probe = (
        "import sys\n"
        "from remediator.controller import app, cli\n"
        "from remediator.doctor import run, systems\n"
        "from remediator.store import db\n"
        f"db.check({url!r})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')))\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert found.stdout.strip() == "[]", found.stdout
