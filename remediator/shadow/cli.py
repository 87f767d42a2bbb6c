"""`remediator report --since 7d`: the shadow-mode report of the recorded history."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from remediator.errors import RemediatorError
from remediator.settings import load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="what a dry-run controller would have done (shadow-mode report)"
    )
    parser.add_argument("--config", type=Path, help="the controller's YAML settings file")
    parser.add_argument("--since", default="7d", help="how far back (e.g. 7d, 36h; default 7d)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from remediator.clock import utcnow
    from remediator.policy.durations import parse_duration
    from remediator.shadow.load import shadow_report
    from remediator.store.db import make_engine, make_session_factory
    from remediator.store.repository import Repository

    try:
        settings = load_settings(args.config)
        window = parse_duration(args.since)
    except (RemediatorError, ValueError) as exc:
        print(f"remediator report: {exc}", file=sys.stderr)
        return 2
    until = utcnow()
    engine = make_engine(settings.database_url)
    try:
        repository = Repository(make_session_factory(engine), settings.cluster_name)
        report = shadow_report(repository, until - window, until)
    except (RemediatorError, SQLAlchemyError) as exc:
        print(f"remediator report: cannot read the history: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(json.dumps(report.to_json(), indent=2) if args.format == "json" else report.to_text())
    return 0
