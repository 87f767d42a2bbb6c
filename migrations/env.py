"""Alembic environment for remediator.

Run through `remediator db upgrade` (or remediator.store.db.upgrade), which hands over an engine
in `config.attributes["engine"]`. Run as plain `alembic`, the URL comes from
`REMEDIATOR_DATABASE_URL`. `render_as_batch` lets the same revisions alter SQLite tables.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import Engine

from remediator.store.db import make_engine
from remediator.store.models import Base, exists_on

config = context.config
target_metadata = Base.metadata


def _engine() -> tuple[Engine, bool]:
    given = config.attributes.get("engine")
    if isinstance(given, Engine):
        return given, False
    url = os.environ.get("REMEDIATOR_DATABASE_URL")
    if not url:
        raise RuntimeError("no engine given and REMEDIATOR_DATABASE_URL is not set")
    return make_engine(url), True


def run_migrations_online() -> None:
    engine, owned = _engine()
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
                include_object=lambda item, *_: exists_on(connection.dialect.name, item),
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        if owned:
            engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) mode is not supported: migrations need a connection")
run_migrations_online()
