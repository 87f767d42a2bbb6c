"""`remediator db upgrade | check`: bring the schema to this release's head, or verify it is there.

The URL comes from --database-url, else from the settings (--config file under the
REMEDIATOR_* environment, or the environment alone).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from remediator.errors import RemediatorError
from remediator.settings import load_settings
from remediator.store import db


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("db", help="manage the remediation database")
    commands = parser.add_subparsers(dest="db_command", metavar="SUBCOMMAND", required=True)
    for name, func, help_text in (
        ("upgrade", _upgrade, "apply every pending migration"),
        ("check", _check, "exit 0 when the database answers and its schema is current"),
    ):
        command = commands.add_parser(name, help=help_text)
        source = command.add_mutually_exclusive_group()
        source.add_argument("--database-url", help="SQLAlchemy URL (postgresql://… or sqlite:///…)")
        source.add_argument("--config", type=Path, help="controller settings YAML file")
        command.set_defaults(func=func)


def _url(args: argparse.Namespace) -> str:
    if args.database_url:
        return str(args.database_url)
    return load_settings(args.config).database_url


def _upgrade(args: argparse.Namespace) -> int:
    try:
        url = _url(args)
        db.upgrade(url)
    except (RemediatorError, SQLAlchemyError) as exc:
        print(f"remediator db upgrade: {exc}", file=sys.stderr)
        return 1
    print(f"database {db.normalise_url(url).render_as_string()} at revision {db.head_revision()}")
    return 0


def _check(args: argparse.Namespace) -> int:
    try:
        db.check(_url(args))
    except RemediatorError as exc:
        print(f"remediator db check: {exc}", file=sys.stderr)
        return 1
    print("database ready")
    return 0
