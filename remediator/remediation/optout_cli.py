"""`remediator optout add | list | remove`: record, show and end opt-outs in the controller's
database (docs/optouts.md). Who asks is the login name unless `--by` says otherwise; the longest
opt-out allowed is the policy set's `max_opt_out` (settings.yaml), 7 days when unset.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from remediator.errors import NotFoundError, PolicyError, RemediatorError
from remediator.model.optout import DEFAULT_MAX_OPT_OUT, OptOutRecord, OptOutRefused, parse_target
from remediator.policy.durations import parse_duration
from remediator.policy.loader import load_policy_dir
from remediator.settings import Settings, load_settings
from remediator.store.db import make_engine, make_session_factory
from remediator.store.optouts import Asker, OptOutBook


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("optout", help="record, list and end audited opt-outs")
    sub = parser.add_subparsers(dest="optout_command", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="keep the remediation off a node, pod or Slurm job's node")
    target = add.add_mutually_exclusive_group(required=True)
    target.add_argument("--node", help="a Kubernetes node name")
    target.add_argument("--pod", help="NAMESPACE/NAME of a pod: its node is held")
    target.add_argument("--slurm-job", help="a Slurm job id: its nodes are held")
    add.add_argument("--until", required=True, help="how long, e.g. 6h, 2d, 90m")
    add.add_argument("--reason", required=True, help="who relies on it and why (required)")
    add.set_defaults(func=_add)
    listed = sub.add_parser("list", help="opt-outs in force (--all: also removed and expired)")
    listed.add_argument("--all", action="store_true")
    listed.set_defaults(func=_list)
    remove = sub.add_parser("remove", help="end an opt-out now")
    remove.add_argument("id", type=int)
    remove.add_argument("--reason", help="why it ends early")
    remove.set_defaults(func=_remove)
    for command in (add, listed, remove):
        command.add_argument("--config", type=Path, help="controller settings YAML file")
        command.add_argument("--by", help="who asks (default: the login name)")
        command.add_argument("--json", action="store_true", help="print JSON")


def _book(settings: Settings) -> OptOutBook:
    engine = make_engine(settings.database_url)
    return OptOutBook(make_session_factory(engine), settings.cluster_name)


def _asker(args: argparse.Namespace) -> Asker:
    return Asker(args.by or getpass.getuser(), f"cli {socket.gethostname()}"[:64])


def _longest(settings: Settings) -> timedelta:
    """The policy set's max_opt_out; the default (with a warning) when the set is refused."""
    try:
        return load_policy_dir(settings.policies_dir).settings.max_opt_out
    except PolicyError as exc:
        print(
            f"warning: policies refused ({exc.problems[0]}); max_opt_out taken as "
            f"{DEFAULT_MAX_OPT_OUT.days}d",
            file=sys.stderr,
        )
        return DEFAULT_MAX_OPT_OUT


def _show(record: OptOutRecord, now_state: str) -> dict[str, Any]:
    return {
        "id": record.id,
        "cluster": record.cluster,
        "scope": record.scope.value,
        "target": record.target,
        "by": record.actor,
        "reason": record.reason,
        "since": record.since.isoformat(),
        "until": record.until.isoformat(),
        "state": now_state,
        "removed_by": record.removed_by,
    }


def _print(records: list[OptOutRecord], book: OptOutBook, as_json: bool) -> None:
    now = book.clock.now()
    rows = [_show(r, r.state(now)) for r in records]
    if as_json:
        print(json.dumps(rows))
        return
    for row in rows:
        print(
            f"#{row['id']} {row['state']} {row['scope'].replace('_', ' ')} {row['target']} "
            f"by {row['by']} since {row['since']} until {row['until']}: {row['reason']}"
        )


def _add(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        target = parse_target(args.node, args.pod, args.slurm_job)
        try:
            length = parse_duration(args.until)
        except ValueError as exc:
            raise OptOutRefused(f"--until: {exc}") from exc
        book = _book(settings)
        record = book.add(
            target,
            lasting=length,
            reason=args.reason,
            asker=_asker(args),
            longest=_longest(settings),
        )
    except (OptOutRefused, RemediatorError, SQLAlchemyError) as exc:
        print(f"remediator optout add: refused: {exc}", file=sys.stderr)
        return 2
    _print([record], book, args.json)
    return 0


def _list(args: argparse.Namespace) -> int:
    try:
        book = _book(load_settings(args.config))
        records = list(book.list(ended=args.all))
    except (RemediatorError, SQLAlchemyError) as exc:
        print(f"remediator optout list: {exc}", file=sys.stderr)
        return 1
    _print(records, book, args.json)
    return 0


def _remove(args: argparse.Namespace) -> int:
    try:
        book = _book(load_settings(args.config))
        record = book.remove(args.id, asker=_asker(args), reason=args.reason)
    except NotFoundError as exc:
        print(f"remediator optout remove: {exc}", file=sys.stderr)
        return 1
    except (OptOutRefused, RemediatorError, SQLAlchemyError) as exc:
        print(f"remediator optout remove: refused: {exc}", file=sys.stderr)
        return 2
    _print([record], book, args.json)
    return 0
