"""Engines, sessions and schema upgrades for the two supported backends.

PostgreSQL (psycopg 3) is the production store; SQLite (a file, WAL) serves demos and single-node
installs. On SQLite a writing session starts with BEGIN IMMEDIATE so that a read-then-write
transaction queues behind other writers (busy_timeout) instead of failing on a stale snapshot.

Migrations are located, in order: `$REMEDIATOR_MIGRATIONS_DIR`; a `migrations/` directory beside
the package (a source checkout or an editable install); `<sys.prefix>/share/remediator/migrations`
(a container image copies the directory there). The first that holds `env.py` wins.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, make_url, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from remediator.errors import RemediatorError, TransientError

if TYPE_CHECKING:
    from alembic.config import Config

SQLITE_BUSY_TIMEOUT_MS = 15_000
WRITE_OPTION = "remediator_write"
MIGRATIONS_ENV = "REMEDIATOR_MIGRATIONS_DIR"
SCHEMA_HEAD = "0016_fences38"
"""The revision this code's tables are at (a test holds it to the migrations' head). A constant
so that `remediator run` checks its schema without loading alembic, ~10 MB resident for the
process's life; alembic is imported only to migrate."""


class StoreUnavailable(TransientError):
    """The database cannot be reached or its schema is not the one this code expects."""


def normalise_url(url: str | URL) -> URL:
    """`postgresql://` and `postgres://` mean psycopg 3 here (SQLAlchemy's default is psycopg2)."""
    if isinstance(url, str) and url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        # The text is not echoed: a mistyped URL may still carry a password.
        raise RemediatorError(
            "the database URL cannot be parsed: expected postgresql://… or sqlite:///…"
        ) from exc
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str | URL, *, echo: bool = False) -> Engine:
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, echo)
    if parsed.get_backend_name() != "postgresql":
        raise RemediatorError(f"unsupported database {parsed.get_backend_name()!r}")
    return create_engine(parsed, echo=echo, pool_pre_ping=True, pool_size=5, max_overflow=10)


def _sqlite_engine(url: URL, echo: bool) -> Engine:
    in_memory = url.database in (None, "", ":memory:")
    kwargs: dict[str, Any] = {
        "connect_args": {"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
    }
    if in_memory:
        # One shared connection, or every checkout would see its own empty database.
        kwargs["poolclass"] = StaticPool
    else:
        kwargs.update(pool_size=5, max_overflow=10)
    engine = create_engine(url, echo=echo, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from the driver, so the "begin" hook below decides the mode.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        immediate = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session], *, write: bool = False) -> Iterator[Session]:
    """One transaction: committed when the block ends, rolled back when it raises."""
    with factory() as session:
        if write:
            session.connection(execution_options={WRITE_OPTION: True})
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def migrations_dir() -> Path:
    candidates: list[Path] = []
    if env := os.environ.get(MIGRATIONS_ENV):
        candidates.append(Path(env))
    candidates.extend(parent / "migrations" for parent in Path(__file__).resolve().parents[1:4])
    candidates.append(Path(sys.prefix) / "share" / "remediator" / "migrations")
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise RemediatorError(f"migrations not found (set {MIGRATIONS_ENV}); looked in: {looked}")


def alembic_config(engine: Engine | None = None) -> Config:
    """A Config without an ini file; env.py takes the engine from `attributes`."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if engine is not None:
        config.attributes["engine"] = engine
    return config


def upgrade(url: str | URL | Engine, revision: str = "head") -> None:
    from alembic import command

    engine = url if isinstance(url, Engine) else make_engine(url)
    try:
        command.upgrade(alembic_config(engine), revision)
    finally:
        if engine is not url:
            engine.dispose()


def downgrade(url: str | URL | Engine, revision: str) -> None:
    from alembic import command

    engine = url if isinstance(url, Engine) else make_engine(url)
    try:
        command.downgrade(alembic_config(engine), revision)
    finally:
        if engine is not url:
            engine.dispose()


def head_revision() -> str | None:
    """The migrations' head, read from their scripts."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def check(url: str | URL | Engine) -> None:
    """Readiness: the database answers and its schema is at this code's head revision."""
    engine = url if isinstance(url, Engine) else make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            current = schema_revision(conn)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"database unreachable: {exc.__class__.__name__}: {exc}") from exc
    finally:
        if engine is not url:
            engine.dispose()
    if current != SCHEMA_HEAD:
        raise StoreUnavailable(
            f"schema at revision {current}, expected {SCHEMA_HEAD}: run db upgrade"
        )


def schema_revision(conn: Connection) -> str | None:
    """The revision alembic recorded in the database, None before the first upgrade."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    found = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return ",".join(sorted(found)) or None
