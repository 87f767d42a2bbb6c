"""`remediator policy backtest PROPOSED_DIR …` and `remediator signals export …`.

The backtest exits 0 whenever it ran, whatever it found (a reviewer reads the report; CI posts
it); 1 when it could not run (bad arguments, unreadable record or policies, a cluster without
data, a window without a single reading).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from remediator.backtest import render
from remediator.backtest.compare import Report
from remediator.backtest.recording import PolicyVersion, from_database, read_exports, write_exports
from remediator.backtest.replay import PolicyTimeline, run_filter
from remediator.backtest.run import (
    ALL,
    backtest_database,
    check_readings,
    named_baseline,
    pick_clusters,
    proposed_set,
    recorded_baseline,
    run_replays,
)
from remediator.errors import RemediatorError
from remediator.policy.durations import parse_duration
from remediator.store.archive import ArchivedRun, RunFilter, archived_clusters, iter_runs
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
    parser.add_argument(
        "--cluster",
        help="cluster name, or `all` (each cluster apart); default: the record's only cluster",
    )


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


def run_backtest(args: argparse.Namespace) -> list[tuple[str, Report]]:
    """One report per cluster the arguments name (see run.pick_clusters)."""
    since, until = _window(args)
    tolerance = parse_duration(args.tolerance)
    fixed = named_baseline(args.baseline, args.baseline_ref, args.proposed)
    if args.signals is None:
        engine = make_engine(args.database)
        try:
            factory = make_session_factory(engine)
            clusters = pick_clusters(archived_clusters(factory), args.cluster, "the database")
            return [
                (
                    cluster,
                    backtest_database(
                        factory,
                        cluster,
                        args.proposed,
                        since,
                        until,
                        baseline=fixed,
                        tolerance=tolerance,
                    ),
                )
                for cluster in clusters
            ]
        finally:
            engine.dispose()
    proposed = proposed_set(args.proposed)
    chosen: list[tuple[PolicyTimeline, str]] = []

    def filter_for(versions: Sequence[PolicyVersion]) -> RunFilter:
        chosen.append(fixed or recorded_baseline(versions))
        return run_filter([chosen[-1][0], proposed[0]])

    sections = read_exports(args.signals, filter_for)
    names = [recording.cluster for recording in sections]
    clusters = pick_clusters(names, args.cluster, str(args.signals))
    reports: list[tuple[str, Report]] = []
    for cluster in clusters:
        recording = sections[names.index(cluster)]
        start = since if args.since is not None else recording.since
        end = until if args.until is not None else recording.until
        start, end = max(start, recording.since), min(end, recording.until)
        window = replace(recording, since=start, until=end)
        check_readings(window, cluster)
        baseline = fixed or recorded_baseline(recording.policy_versions)
        reports.append((cluster, run_replays(window, baseline, proposed, tolerance)))
    return reports


def _backtest(args: argparse.Namespace) -> int:
    try:
        reports = run_backtest(args)
    except (RemediatorError, SQLAlchemyError, ValueError) as exc:
        print(f"remediator policy backtest: {exc}", file=sys.stderr)
        return 1
    if args.cluster != ALL:
        sys.stdout.write(FORMATS[args.format](reports[0][1]))
    elif args.format == "json":
        body = {"clusters": {name: render.to_json(report) for name, report in reports}}
        sys.stdout.write(json.dumps(body, indent=2))
    else:
        heading = "## cluster {}\n\n" if args.format == "markdown" else "=== cluster {} ===\n"
        sys.stdout.write(
            "\n".join(heading.format(name) + FORMATS[args.format](r) for name, r in reports)
        )
    return 0


def _export(args: argparse.Namespace) -> int:
    try:
        since, until = _window(args)
        engine = make_engine(args.database)
        try:
            factory = make_session_factory(engine)
            clusters = pick_clusters(archived_clusters(factory), args.cluster, "the database")
            # Everything but the runs up front (small); the runs streamed straight to the file.
            sections = [
                (
                    from_database(factory, cluster, since, until, RunFilter()),
                    _Counted(iter_runs(factory, cluster, since, until)),
                )
                for cluster in clusters
            ]
            if args.output is not None:
                with args.output.open("wb") as out:
                    lines = write_exports(sections, out)
            else:
                lines = write_exports(sections, sys.stdout.buffer)
                sys.stdout.buffer.flush()
        finally:
            engine.dispose()
    except (RemediatorError, SQLAlchemyError, OSError) as exc:
        print(f"remediator signals export: {exc}", file=sys.stderr)
        return 1
    for recording, counted in sections:
        print(
            f"cluster {recording.cluster}: exported {counted.count} runs, "
            f"{len(recording.nodes)} node changes, "
            f"{len(recording.remediations)} remediations",
            file=sys.stderr,
        )
    print(f"{lines} lines", file=sys.stderr)
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
