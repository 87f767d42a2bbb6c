"""Running a backtest: the baseline and proposed policy sets, the recording, two replays and
their comparison. Shared by the CLI and the console."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from remediator.backtest.compare import Report, compare
from remediator.backtest.recording import PolicyVersion, Recording, from_database, policy_versions
from remediator.backtest.replay import (
    DEFAULT_TOLERANCE,
    BacktestError,
    PolicyTimeline,
    load_files,
    replay,
    run_filter,
)
from remediator.errors import PolicyError
from remediator.policy.loader import PolicySet, load_policy_dir

EPOCH = datetime.min.replace(tzinfo=UTC)
ALL = "all"


def pick_clusters(available: Sequence[str], requested: str | None, where: str) -> list[str]:
    """The clusters a backtest or an export covers: the named one, every one (`all`), or with no
    name the record's only one. A cluster without data is refused, naming those with data: a
    misspelt name must not read as "this change does nothing"."""
    if not available:
        raise BacktestError(f"{where} holds no archived signals for any cluster")
    names = ", ".join(available)
    if requested == ALL:
        return list(available)
    if requested is None:
        if len(available) > 1:
            raise BacktestError(
                f"{where} holds signals of several clusters ({names}): "
                "name one with --cluster, or --cluster all"
            )
        return [available[0]]
    if requested not in available:
        raise BacktestError(
            f"cluster {requested!r} has no archived signals in {where}; clusters with data: {names}"
        )
    return [requested]


def check_readings(recording: Recording, cluster: str) -> None:
    """A window without a single reading proves nothing: refuse rather than report "no change"."""
    window = (recording.since, recording.until)
    if not any(window[0] <= at < window[1] for times in recording.cycles.values() for at in times):
        raise BacktestError(
            f"cluster {cluster!r}: no signal readings between {recording.since.isoformat()} and "
            f"{recording.until.isoformat()} (the archive holds none in that window)"
        )


def load_dir(directory: Path) -> PolicySet:
    try:
        return load_policy_dir(directory)
    except PolicyError as exc:
        raise BacktestError(f"{directory}: " + "; ".join(exc.problems)) from exc


def files_at_ref(directory: Path, ref: str) -> dict[str, str]:
    """The policy files of `directory` as committed at `ref`."""

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(directory), *argv],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise BacktestError(f"git {' '.join(argv)}: {detail.strip()}") from exc
        return done.stdout

    prefix = git("rev-parse", "--show-prefix").strip()
    names = git("ls-tree", "--full-tree", "--name-only", f"{ref}:{prefix}").splitlines()
    files = {
        name: git("show", f"{ref}:{prefix}{name}")
        for name in names
        if name.endswith((".yaml", ".yml"))
    }
    if not files:
        raise BacktestError(f"{directory} at {ref}: no policy files")
    return files


def named_baseline(
    directory: Path | None, ref: str | None, proposed_dir: Path
) -> tuple[PolicyTimeline, str] | None:
    """The baseline named on the command line (a directory, or PROPOSED_DIR at a git ref)."""
    if directory is not None:
        return [(EPOCH, load_dir(directory))], str(directory)
    if ref is not None:
        files = files_at_ref(proposed_dir, ref)
        return [(EPOCH, load_files(files))], f"{proposed_dir} at {ref}"
    return None


def recorded_baseline(versions: Sequence[PolicyVersion]) -> tuple[PolicyTimeline, str]:
    """The policy versions as the controller really loaded them, each from its load time."""
    if not versions:
        raise BacktestError(
            "no policy versions recorded for this window: give --baseline or --baseline-ref"
        )
    loaded: dict[str, PolicySet] = {}
    timeline: list[tuple[datetime, PolicySet]] = []
    for version in versions:
        if version.content_hash not in loaded:
            loaded[version.content_hash] = load_files(version.files)
        timeline.append((version.loaded_at, loaded[version.content_hash]))
    return timeline, "the policy versions active at the time"


def backtest_database(
    factory: sessionmaker[Session],
    cluster: str,
    proposed_dir: Path,
    since: datetime,
    until: datetime,
    *,
    baseline: tuple[PolicyTimeline, str] | None = None,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> Report:
    """Backtest `proposed_dir` against a database's archive; the baseline defaults to the
    policy versions the controller really ran."""
    proposed = proposed_set(proposed_dir)
    chosen = baseline or recorded_baseline(policy_versions(factory, cluster, until))
    wanted = run_filter([chosen[0], proposed[0]])
    recording = from_database(factory, cluster, since, until, wanted)
    check_readings(recording, cluster)
    return run_replays(recording, chosen, proposed, tolerance)


def proposed_set(directory: Path) -> tuple[PolicyTimeline, str]:
    return [(EPOCH, load_dir(directory))], str(directory)


def run_replays(
    recording: Recording,
    baseline: tuple[PolicyTimeline, str],
    proposed: tuple[PolicyTimeline, str],
    tolerance: timedelta,
) -> Report:
    base = replay(recording, baseline[0], tolerance=tolerance)
    new = replay(recording, proposed[0], tolerance=tolerance)
    return compare(
        base,
        new,
        recording.remediations,
        since=recording.since,
        until=recording.until,
        tolerance=tolerance,
        baseline_name=baseline[1],
        proposed_name=proposed[1],
        cluster=recording.cluster,
    )
