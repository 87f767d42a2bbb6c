"""Heartbeats coalesced: memory first, one batched write per period, at once on a liveness
change; counted at the database itself (every INSERT into agent_heartbeats), on a fake clock."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event

from remediator.clock import FakeClock
from remediator.store import db
from remediator.store.heartbeats import HeartbeatBook
from remediator.store.records import AgentStatus
from remediator.store.repository import Repository

START = datetime(2026, 3, 1, tzinfo=UTC)
SILENT = timedelta(seconds=60)


class Writes:
    """Statements that wrote heartbeat rows, as the database driver saw them."""

    def __init__(self, engine: Engine) -> None:
        self.statements = 0
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO AGENT_HEARTBEATS"):
            self.statements += 1


@pytest.fixture
def engine(sqlite_head_template: Path, tmp_path: Path) -> Iterator[Engine]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    built = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    yield built
    built.dispose()


def book_on(engine: Engine, clock: FakeClock, flush_seconds: float = 5.0) -> HeartbeatBook:
    repo = Repository(db.make_session_factory(engine), "c1", clock)
    return HeartbeatBook(repo, clock, silent_after=SILENT, flush_seconds=flush_seconds)


def beat(book: HeartbeatBook, node: str) -> bool:
    return book.record(node, agent="a", version="1", started_at=START, stats={"n": 1})


def test_a_thousand_agents_cost_one_write_per_period(engine: Engine) -> None:
    clock = FakeClock(START)
    writes = Writes(engine)
    book = book_on(engine, clock)
    nodes = [f"n{i:04d}" for i in range(1000)]
    for node in nodes:  # first sight: each is news, yet one flush takes them all
        beat(book, node)
    clock.advance(1)
    assert book.flush_due()
    book.tick()
    assert writes.statements == 1

    # Then 60 s of heartbeats every 10 s, spread over each second, with a tick every second.
    for second in range(60):
        clock.advance(1)
        for node in nodes[(second % 10) * 100 : (second % 10 + 1) * 100]:
            assert not beat(book, node)  # known and reporting: no liveness change
        book.tick()
    assert writes.statements <= 1 + 60 // 5
    assert book.stats().pending == 0
    stored = {s.node: s.seen_at for s in book_on(engine, clock).statuses()}
    assert len(stored) == 1000
    assert min(stored.values()) >= clock.now() - timedelta(seconds=10)


def test_between_flushes_readers_see_memory_and_the_database_catches_up(engine: Engine) -> None:
    clock = FakeClock(START)
    book = book_on(engine, clock)
    beat(book, "n1")
    book.flush()
    clock.advance(2)
    beat(book, "n1")
    assert not book.flush_due()  # 2 s after the last flush, nothing urgent
    other_replica = book_on(engine, clock)
    assert other_replica.status("n1").seen_at == START  # type: ignore[union-attr]
    assert book.status("n1").seen_at == START + timedelta(seconds=2)  # type: ignore[union-attr]
    assert [s.seen_at for s in book.statuses()] == [START + timedelta(seconds=2)]
    clock.advance(3)
    book.tick()
    assert other_replica.status("n1").seen_at == START + timedelta(seconds=2)  # type: ignore[union-attr]


def test_a_new_or_returning_agent_is_written_at_once_but_at_most_once_a_second(
    engine: Engine,
) -> None:
    clock = FakeClock(START)
    writes = Writes(engine)
    book = book_on(engine, clock)
    beat(book, "n1")
    clock.advance(1)
    book.tick()
    clock.advance(0.5)
    assert beat(book, "n2")  # new: urgent
    assert not book.claim_flush()  # but the last flush was 0.5 s ago
    clock.advance(0.5)
    assert book.claim_flush()
    assert not book.claim_flush()  # claimed once until it ran
    book.flush()
    assert writes.statements == 2

    clock.advance(61)
    assert book.tick() == ("n1", "n2")  # both went silent: noticed once
    assert book.tick() == ()
    assert book.stats().went_silent == 2
    assert beat(book, "n1")  # back from silence: news
    assert book.claim_flush()
    book.flush()
    assert book.stats().came_back == 1
    assert writes.statements == 3


def test_after_a_restart_known_agents_are_not_news(engine: Engine) -> None:
    clock = FakeClock(START)
    first = book_on(engine, clock)
    for node in ("n1", "n2"):
        beat(first, node)
    first.flush()
    clock.advance(3)
    restarted = book_on(engine, clock)
    assert not beat(restarted, "n1")
    assert not restarted.claim_flush()  # 3 s since nothing was flushed here: not due, no news
    assert beat(restarted, "n3")


def test_a_failed_write_keeps_the_rows_pending(engine: Engine) -> None:
    clock = FakeClock(START)
    book = book_on(engine, clock)
    beat(book, "n1")

    def refuse(*_args: Any) -> None:
        raise RuntimeError("database gone")

    event.listen(engine, "before_cursor_execute", refuse)
    with pytest.raises(RuntimeError):
        book.flush()
    assert book.stats().pending == 1
    event.remove(engine, "before_cursor_execute", refuse)
    assert book.flush() == 1
    assert book_on(engine, clock).status("n1") is not None


def test_a_large_fleet_is_asked_for_a_longer_period_and_judged_on_it(engine: Engine) -> None:
    """Within the budget agents keep their own period; past it the book asks for the period
    that keeps the budget and calls an agent silent only after three of those missed."""
    clock = FakeClock(START)
    repo = Repository(db.make_session_factory(engine), "c1", clock)
    book = HeartbeatBook(repo, clock, silent_after=SILENT, budget_per_second=40.0)
    for i in range(400):
        beat(book, f"n{i:05d}")
    assert book.asked_period() == 10.0 and book.silent_after == SILENT
    for i in range(400, 10_000):
        beat(book, f"n{i:05d}")
    assert book.asked_period() == 250.0
    assert book.silent_after == timedelta(seconds=750)
    clock.advance(700)  # past the configured 60 s, within three asked periods
    assert book.tick() == ()
    clock.advance(60)
    assert len(book.tick()) == 10_000


def test_a_heartbeat_in_the_same_instant_as_the_flushed_one_is_the_one_read(engine: Engine) -> None:
    """CI failure of stop 32: on a clock that did not move between two heartbeats (a frozen test
    clock; a coarse one), the flushed row won the tie and readers kept its old stats for good.
    This replica's memory is never older than what it wrote itself."""
    clock = FakeClock(START)
    book = book_on(engine, clock)
    book.record("n1", agent="a", version="1", started_at=START, stats={"log_restarts": 0})
    book.flush()
    book.record("n1", agent="a", version="1", started_at=START, stats={"log_restarts": 1})
    status = book.status("n1")
    assert status is not None and status.stats["log_restarts"] == 1
    assert [s.stats["log_restarts"] for s in book.statuses()] == [1]


def test_the_hardware_named_in_heartbeats_is_written_with_the_books_flush(engine: Engine) -> None:
    """`also_flush` (the ledger's sightings) runs once per flush, never once per heartbeat."""
    clock = FakeClock(START)
    runs: list[datetime] = []
    repo = Repository(db.make_session_factory(engine), "c1", clock)
    book = HeartbeatBook(
        repo, clock, silent_after=SILENT, also_flush=lambda: runs.append(clock.now())
    )
    for node in [f"n{i:03d}" for i in range(300)]:
        beat(book, node)
    assert runs == []  # the hot path never calls it
    clock.advance(1)
    assert book.claim_flush()
    book.flush()
    assert runs == [clock.now()]
    for _ in range(5):
        beat(book, "n000")
    assert not book.claim_flush()  # within the period: nothing yet
    clock.advance(5)
    assert book.tick() == ()
    assert len(runs) == 2


def test_silence_is_noticed_in_heartbeat_order_whoever_beat_last(engine: Engine) -> None:
    """A tick reads the agents oldest heartbeat first and stops at the first still within the
    bound: an agent that beat again is behind the others, one loaded after a restart in the
    order its row says."""
    clock = FakeClock(START)
    book = book_on(engine, clock)
    for node in ("n1", "n2", "n3"):
        beat(book, node)
        clock.advance(10)
    beat(book, "n1")  # n1 is now the newest
    book.flush()
    clock.advance(45)  # n2 65 s old, n3 55 s, n1 45 s: the bound is 60 s
    assert book.tick() == ("n2",)
    restarted = book_on(engine, clock)  # the same rows, read back by a new replica
    assert restarted.tick() == ()  # loaded as silent already: not news to it
    clock.advance(10)  # n3 65 s, n1 55 s
    assert book.tick() == ("n3",) and restarted.tick() == ("n3",)
    beat(book, "n2")  # back: reporting again, and the newest
    clock.advance(20)
    assert book.tick() == ("n1",)
    assert book.tick() == ()
    clock.advance(45)
    assert book.tick() == ("n2",)


class Reads:
    """Heartbeat rows a book's repository returned to it."""

    def __init__(self, book: HeartbeatBook) -> None:
        self.rows = 0
        repository = book._repository
        read = repository.agent_statuses

        def counted(seen_after: datetime | None = None) -> tuple[AgentStatus, ...]:
            found = read(seen_after)
            self.rows += len(found)
            return found

        repository.agent_statuses = counted  # type: ignore[method-assign]


def test_a_reader_reads_again_only_the_rows_seen_lately_and_misses_none(engine: Engine) -> None:
    """Another replica's rows: the first read takes them all, later ones those seen since the
    newest read (less an overlap), including a row flushed late with an older heartbeat."""
    clock = FakeClock(START)
    writer, late, reader = book_on(engine, clock), book_on(engine, clock), book_on(engine, clock)
    for i in range(50):
        beat(writer, f"n{i:02d}")
    writer.flush()
    clock.advance(600)
    beat(writer, "n00")
    writer.flush()
    reads = Reads(reader)
    assert len(reader.statuses()) == 50 and reads.rows == 50  # the first read: every row

    clock.advance(1)
    beat(late, "late")  # heard now, written only after the reader's next read
    clock.advance(10)
    beat(writer, "n01")
    writer.flush()
    reads.rows = 0
    seen = {s.node: s.seen_at for s in reader.statuses()}
    assert reads.rows == 2  # n00 and n01: the 48 rows of 611 s ago are not read again
    assert seen["n01"] == clock.now() and "late" not in seen and len(seen) == 50

    late.flush()  # its heartbeat is older than the newest row the reader has read...
    clock.advance(6)
    seen = {s.node: s.seen_at for s in reader.statuses()}
    assert seen["late"] == START + timedelta(seconds=601)  # ...and it is read, not missed
    assert len(seen) == 51
