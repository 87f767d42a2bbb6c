"""`remediator policy backtest PROPOSED_DIR …` and `remediator signals export …`.

The backtest exits 0 whenever it ran, whatever it found (a reviewer reads the report; CI posts
it); 1 when it could not run (bad arguments, unreadable record or policies).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from remediator.backtest import render
from remediator.backtest.compare import Report
from remediator.backtest.recording import PolicyVersion, from_database, read_export, write_export
from remediator.backtest.replay import PolicyTimeline, run_filter
from remediator.backtest.run import (
    backtest_database,
    named_baseline,
    proposed_set,
    recorded_baseline,
    run_replays,
)
from remediator.errors import RemediatorError
from remediator.policy.durations import parse_duration
from remediator.store.archive import ArchivedRun, RunFilter, iter_runs
from remediator.store.db import make_engine, make_session_factory

FORMATS = {"text": render.to_text, "markdown": render.to_markdown, "json": render.to_json_text}


def add_backtest(subparsers: Any) -> None:
    """Registered under `remediator policy` by the CLI root (cli.NESTED)."""
    parser = subparsers.add_parser(
        "backtest", help="replay recorded signals through baseline and proposed policies"
    )
    parser.add_argument("proposed", type=Path, metavar="PROPOSED_DIR")
    baseline = parser.add_mutually_exclusive_group()
    baseline.add_argument("--baseline", type=Path, metavar="DIR", help="baseline policy directory")
    baseline.add_argument(
        "--baseline-ref",
        metavar="GIT_REF",
        help="baseline = PROPOSED_DIR as of this git ref (default: the versions really active)",
    )
    record = parser.add_mutually_exclusive_group(required=True)
    record.add_argument("--database", metavar="URL", help="the controller's database")
    record.add_argument("--signals", type=Path, metavar="FILE", help="a `signals export` file")
    _window_arguments(parser)
    parser.add_argument("--format", choices=sorted(FORMATS), default="text")
    parser.add_argument(
        "--tolerance",
        default="1m",
        help="a replayed remediation matches a real one within this time (default 1m)",
    )
    parser.set_defaults(func=_backtest)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("signals", help="the archive of received signals")
    sub = parser.add_subparsers(dest="signals_command", metavar="ACTION", required=True)
    export = sub.add_parser("export", help="write the archive of a window as JSON lines, gzip'd")
    export.add_argument("--database", metavar="URL", required=True)
    _window_arguments(export)
    export.add_argument("--output", type=Path, help="file to write (default: standard output)")
    export.set_defaults(func=_export)


def _window_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--since",
        help="start: a duration back from now or an ISO time (default 30d; for --signals, the "
        "file's own window)",
    )
    parser.add_argument("--until", help="end: a duration back from now or an ISO time (now)")
    parser.add_argument("--cluster", default="default", help="cluster name in the database")


def parse_when(text: str, now: datetime) -> datetime:
    """`30d`, `12h` … back from now, or an ISO 8601 time (UTC when it names no zone)."""
    try:
        return now - parse_duration(text)
    except (ValueError, TypeError):
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise RemediatorError(f"{text!r} is neither a duration (30d) nor an ISO time") from exc
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _window(args: argparse.Namespace) -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    since = parse_when(args.since or "30d", now)
    until = parse_when(args.until, now) if args.until else now
    if until <= since:
        raise RemediatorError(f"--until ({until.isoformat()}) must be after --since")
    return since, until


def run_backtest(args: argparse.Namespace) -> Report:
    since, until = _window(args)
    tolerance = parse_duration(args.tolerance)
    fixed = named_baseline(args.baseline, args.baseline_ref, args.proposed)
    if args.signals is None:
        engine = make_engine(args.database)
        try:
            return backtest_database(
                make_session_factory(engine),
                args.cluster,
                args.proposed,
                since,
                until,
                baseline=fixed,
                tolerance=tolerance,
            )
        finally:
            engine.dispose()
    proposed = proposed_set(args.proposed)
    chosen: list[tuple[PolicyTimeline, str]] = []

    def filter_for(versions: Sequence[PolicyVersion]) -> RunFilter:
        chosen.append(fixed or recorded_baseline(versions))
        return run_filter([chosen[0][0], proposed[0]])

    recording = read_export(args.signals, filter_for)
    if args.since is None:
        since = recording.since
    if args.until is None:
        until = recording.until
    since, until = max(since, recording.since), min(until, recording.until)
    baseline = chosen[0] if chosen else fixed or recorded_baseline(recording.policy_versions)
    window = replace(recording, since=since, until=until)
    return run_replays(window, baseline, proposed, tolerance)


def _backtest(args: argparse.Namespace) -> int:
    try:
        report = run_backtest(args)
    except (RemediatorError, SQLAlchemyError, ValueError) as exc:
        print(f"remediator policy backtest: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(FORMATS[args.format](report))
    return 0


def _export(args: argparse.Namespace) -> int:
    try:
        since, until = _window(args)
        engine = make_engine(args.database)
        try:
            factory = make_session_factory(engine)
            # Everything but the runs up front (small); the runs streamed straight to the file.
            recording = from_database(factory, args.cluster, since, until, RunFilter())
            counted = _Counted(iter_runs(factory, args.cluster, since, until))
            if args.output is not None:
                with args.output.open("wb") as out:
                    lines = write_export(recording, out, counted)
            else:
                lines = write_export(recording, sys.stdout.buffer, counted)
                sys.stdout.buffer.flush()
        finally:
            engine.dispose()
    except (RemediatorError, SQLAlchemyError, OSError) as exc:
        print(f"remediator signals export: {exc}", file=sys.stderr)
        return 1
    print(
        f"exported {counted.count} runs, {len(recording.nodes)} node changes, "
        f"{len(recording.remediations)} remediations ({lines} lines)",
        file=sys.stderr,
    )
    return 0


class _Counted:
    """Passes runs through, counting them."""

    def __init__(self, runs: Iterator[ArchivedRun]) -> None:
        self._runs = runs
        self.count = 0

    def __iter__(self) -> Iterator[ArchivedRun]:
        for run in self._runs:
            self.count += 1
            yield run
