"""The signal archive on SQLite: runs, floors, cuts, flush, retention, and the export file."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, event, func, select
from sqlalchemy.orm import Session, sessionmaker

from remediator.backtest.recording import RecordingError, from_database, read_export, write_export
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.archive import (
    ArchivedRun,
    NodeSnapshot,
    SignalArchive,
    iter_runs,
    read_cycles,
    read_nodes,
    read_runs,
)
from remediator.store.db import session_scope
from remediator.store.models import ArchivedCycle, ArchivedLabelSet, ArchivedNode, ArchivedSignal

T0 = datetime(2026, 2, 1, tzinfo=UTC)
POLL = timedelta(seconds=15)
NODES = {"n1": NodeSnapshot("pool-a", {"pool": "pool-a"}, True, False)}


@pytest.fixture
def factory(sqlite_head_template: Path, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine: Engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    yield db.make_session_factory(engine)
    engine.dispose()


def temp(value: float, at: datetime, gpu: int = 0) -> Signal:
    return Signal(
        node="n1",
        kind=SignalKind.THERMAL,
        source="prometheus",
        observed_at=at,
        gpu=gpu,
        value=value,
        labels={"Hostname": "n1", "gpu": str(gpu)},
    )


def count_rows(factory: sessionmaker[Session], cluster: str) -> dict[str, int]:
    with session_scope(factory) as session:
        return {
            model.__tablename__: int(
                session.scalar(
                    select(func.count()).select_from(model).where(model.cluster == cluster)
                )
                or 0
            )
            for model in (ArchivedSignal, ArchivedCycle, ArchivedNode, ArchivedLabelSet)
        }


def feed(archive: SignalArchive, values: list[list[float | None]]) -> None:
    """One cycle per entry; each entry lists GPU 0, 1, … values (None: not reported)."""
    for cycle, readings in enumerate(values):
        at = T0 + cycle * POLL
        signals = [temp(v, at, gpu) for gpu, v in enumerate(readings) if v is not None]
        archive.record(signals, NODES, at)


def runs(factory: sessionmaker[Session]) -> list[ArchivedRun]:
    return read_runs(factory, "default", T0 - timedelta(days=1), T0 + timedelta(days=1))


def test_unchanged_readings_are_one_run_and_any_change_starts_another(
    factory: sessionmaker[Session],
) -> None:
    archive = SignalArchive(factory, "default")
    feed(archive, [[71.0], [71.0], [71.0], [72.0], [71.0]])
    archive.flush()
    found = [(r.value, r.first_at, r.last_at, r.readings) for r in runs(factory)]
    assert found == [
        (71.0, T0, T0 + 2 * POLL, 3),
        (72.0, T0 + 3 * POLL, None, 1),
        (71.0, T0 + 4 * POLL, None, 1),
    ]
    assert runs(factory)[0].labels == {"Hostname": "n1", "gpu": "0"}
    cycles = read_cycles(factory, "default", T0, T0 + timedelta(hours=1))
    assert cycles == {"prometheus": [T0 + i * POLL for i in range(5)]}


def test_a_missed_reading_ends_the_run(factory: sessionmaker[Session]) -> None:
    """GPU 0 is absent from one cycle in which its source reported GPU 1."""
    archive = SignalArchive(factory, "default")
    feed(archive, [[75.0, 50.0], [None, 50.0], [75.0, 50.0]])
    archive.flush()
    gpu0 = [(r.first_at, r.readings) for r in runs(factory) if r.gpu == 0]
    assert gpu0 == [(T0, 1), (T0 + 2 * POLL, 1)]


def test_under_the_floor_the_level_holds_and_keeps_its_highest_reading(
    factory: sessionmaker[Session],
) -> None:
    archive = SignalArchive(factory, "default", floors={"thermal": 70.0})
    feed(archive, [[55.0], [57.0], [56.0], [79.0], [79.0], [60.0]])
    archive.flush()
    found = [(r.value, r.readings) for r in runs(factory)]
    assert found == [(57.0, 3), (79.0, 2), (60.0, 1)]


def test_long_runs_are_cut(factory: sessionmaker[Session]) -> None:
    archive = SignalArchive(factory, "default", max_run=timedelta(minutes=1))
    feed(archive, [[74.0]] * 9)
    # The cut runs as written, and the one still open up to the last cycle.
    assert [r.readings for r in runs(factory)] == [4, 4, 1]
    archive.flush()
    assert [r.readings for r in runs(factory)] == [4, 4, 1]


def test_node_changes_and_retention(factory: sessionmaker[Session]) -> None:
    archive = SignalArchive(factory, "default")
    archive.record([temp(74.0, T0)], NODES, T0)
    archive.record([], {"n1": NodeSnapshot("pool-a", {}, False, True)}, T0 + timedelta(days=2))
    archive.record([temp(75.0, T0 + timedelta(days=3))], {}, T0 + timedelta(days=3))
    archive.flush()
    changes = read_nodes(factory, "default", T0 - timedelta(days=1), T0 + timedelta(days=4))
    assert [(c.present, c.ready, c.cordoned) for c in changes] == [
        (True, True, False),
        (True, False, True),
        (False, False, True),
    ]
    assert archive.prune(T0 + timedelta(days=1)) == 1
    counts = count_rows(factory, "default")
    assert counts["signal_archive"] == 1
    assert counts["signal_archive_nodes"] == 2  # the newest row of n1 stays, and what came after
    assert counts["signal_label_sets"] == 1


def test_export_round_trips_and_names_a_bad_line(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    archive = SignalArchive(factory, "default")
    feed(archive, [[71.0], [71.0], [80.0]])
    archive.flush()
    recording = from_database(factory, "default", T0, T0 + timedelta(hours=1))
    path = tmp_path / "signals.jsonl.gz"
    with path.open("wb") as out:
        write_export(recording, out)
    again = read_export(path)
    assert again.runs == recording.runs
    assert again.cycles == recording.cycles
    assert again.nodes == recording.nodes

    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    first_run = next(i for i, line in enumerate(lines) if '"type":"run"' in line)
    lines[first_run] = lines[first_run].replace('"thermal"', '"warmth"')
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(RecordingError, match=rf"signals\.jsonl\.gz:{first_run + 1}: "):
        read_export(path)


def test_runs_still_open_are_read_back_up_to_the_last_cycle(
    factory: sessionmaker[Session], tmp_path: Path
) -> None:
    """Right after an incident the fault is still going: its readings must be in the archive
    (and in an export) before the run ends, and a leader that died leaves no run open."""
    archive = SignalArchive(factory, "default")
    feed(archive, [[71.0, 90.0], [71.0, 90.0], [72.0, 90.0], [72.0, 90.0]])
    found = sorted((r.gpu, r.value, r.first_at, r.last_at, r.readings) for r in runs(factory))
    assert found == [
        (0, 71.0, T0, T0 + POLL, 2),
        (0, 72.0, T0 + 2 * POLL, T0 + 3 * POLL, 2),
        (1, 90.0, T0, T0 + 3 * POLL, 4),
    ]
    recording = from_database(factory, "default", T0, T0 + timedelta(hours=1))
    path = tmp_path / "signals.jsonl.gz"
    with path.open("wb") as out:
        write_export(recording, out, iter_runs(factory, "default", T0, T0 + timedelta(hours=1)))
    exported = sorted((r.gpu, r.value, r.readings) for r in read_export(path).runs)
    assert exported == [(0, 71.0, 2), (0, 72.0, 2), (1, 90.0, 4)]

    # The writer is gone without a flush (a crash); the next leader closes what it left open
    # where its readings stopped, and its own cycles do not extend those runs.
    successor = SignalArchive(factory, "default")
    later = T0 + 10 * POLL
    successor.record([temp(60.0, later, gpu=2)], NODES, later)
    found = sorted((r.gpu, r.value, r.last_at, r.readings) for r in runs(factory))
    assert found == [
        (0, 71.0, T0 + POLL, 2),
        (0, 72.0, T0 + 3 * POLL, 2),
        (1, 90.0, T0 + 3 * POLL, 4),
        (2, 60.0, None, 1),
    ]


def test_each_reading_keeps_its_own_time(factory: sessionmaker[Session]) -> None:
    """Polls come at uneven times; the samples they read are evenly spaced (a scrape every
    15 s). A run rebuilds every reading's own time; a reading off the pattern starts a new run."""
    archive = SignalArchive(factory, "default")
    jitter = [2.6, 0.2, 1.4, 0.0, 2.9, 0.7]
    polls = [T0 + i * POLL + timedelta(seconds=j) for i, j in enumerate(jitter)]
    samples = [T0 + i * POLL for i in range(len(jitter))]
    samples[5] += timedelta(milliseconds=3)  # a late scrape: off the pattern
    for poll, sample in zip(polls, samples, strict=True):
        archive.record([temp(85.0, sample)], NODES, poll)
    found = runs(factory)
    assert [(r.first_at, r.readings) for r in found] == [(polls[0], 5), (polls[5], 1)]
    rebuilt = [found[0].observed(at, i) for i, at in enumerate(polls[:5])]
    assert rebuilt == samples[:5]
    assert found[1].observed(polls[5], 0) == samples[5]

    # Polls with a constant lag (a source stamping readings with the poll's own time) keep
    # the lag, whatever the spacing of the polls.
    other = SignalArchive(factory, "other")
    for poll in polls:
        other.record([temp(85.0, poll)], NODES, poll)
    (run,) = read_runs(factory, "other", T0 - timedelta(days=1), T0 + timedelta(days=1))
    assert run.readings == len(polls)
    assert [run.observed(at, i) for i, at in enumerate(polls)] == polls


def test_a_series_read_twice_in_one_cycle_keeps_both_readings(
    factory: sessionmaker[Session],
) -> None:
    archive = SignalArchive(factory, "default")
    archive.record([temp(81.0, T0), temp(82.0, T0)], NODES, T0)
    archive.record([temp(82.0, T0 + POLL)], NODES, T0 + POLL)
    found = sorted((r.value, r.first_at, r.readings) for r in runs(factory))
    assert found == [(81.0, T0, 1), (82.0, T0, 2)]


def test_a_maintenance_event_is_one_run_per_version_and_reads_back(
    factory: sessionmaker[Session],
) -> None:
    from remediator.signals.maintenance import MaintenanceBook, MaintenanceEvent

    archive = SignalArchive(factory, "default")
    book = MaintenanceBook("aws-maintenance")
    event = MaintenanceEvent.model_validate(
        {
            "event_id": "instance-event-0123456789abcdef0",
            "code": "system-reboot",
            "origin": "aws",
            "instance_id": "i-0abc",
            "node": "n1",
            "window_start": T0 + timedelta(days=2),
            "deadline": T0 + timedelta(days=7),
        }
    )
    moved = event.model_copy(update={"window_start": T0 + timedelta(days=3)})
    for cycle, seen in enumerate([[event], [event], [moved], [moved], []]):
        at = T0 + cycle * POLL
        archive.record(book.update(seen, at), NODES, at)
    archive.flush()
    found = [(r.labels["status"], r.first_at, r.readings) for r in runs(factory)]
    assert found == [
        ("scheduled", T0, 2),
        ("rescheduled", T0 + 2 * POLL, 2),
        ("completed", T0 + 4 * POLL, 1),
    ]
    replayed = [
        MaintenanceEvent.of(
            Signal(
                node=r.node,
                kind=r.kind,
                source=r.source,
                observed_at=r.first_at,
                gpu=r.gpu,
                code=r.code,
                labels=dict(r.labels),
            )
        )
        for r in runs(factory)
    ]
    assert {e.event_id for e in replayed} == {event.event_id}
    assert [e.window_start for e in replayed] == [event.window_start, *[moved.window_start] * 2]


def test_a_run_s_row_is_written_once_open_and_closed_with_only_what_changed(
    factory: sessionmaker[Session],
) -> None:
    """Open rows doubled the archive's writes (issue 23): a run's row is inserted when it
    starts, and its end writes only what the open row does not hold (its end and count; the
    value only when, under the floor, a higher reading came), one batched statement a cycle."""
    statements: list[str] = []
    engine = factory.kw["bind"]

    def seen(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "signal_archive " in statement and not statement.lstrip().startswith("SELECT"):
            statements.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", seen)
    archive = SignalArchive(factory, "default", floors={"thermal": 70.0})
    feed(archive, [[74.0, 55.0]] * 3)
    event.remove(engine, "before_cursor_execute", seen)
    # Two open rows in one statement (beside the first cycle's closing of a dead writer's rows).
    assert [s.split()[0] for s in statements if "open IS" not in s] == ["INSERT"], statements

    statements.clear()
    event.listen(engine, "before_cursor_execute", seen)
    at = T0 + 3 * POLL
    archive.record([temp(75.0, at), temp(58.0, at, gpu=1)], NODES, at)
    at += POLL
    archive.record([temp(76.0, at), temp(58.0, at, gpu=1)], NODES, at)
    event.remove(engine, "before_cursor_execute", seen)
    updates = [s for s in statements if s.startswith("UPDATE")]
    # 74.0's end, then 75.0's: one statement a cycle; 58.0 under the floor stays one run.
    assert len(updates) == 2, statements
    for update in updates:
        columns = update.split(" SET ")[1].split(" WHERE ")[0]
        assert sorted(c.split("=")[0].strip() for c in columns.split(",")) == [
            "last_at",
            "open",
            "readings",
        ], update
    archive.flush()
    found = sorted((r.gpu, r.value, r.readings) for r in runs(factory))
    assert found == [(0, 74.0, 3), (0, 75.0, 1), (0, 76.0, 1), (1, 58.0, 5)]
