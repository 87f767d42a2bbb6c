"""Node agents' heartbeats, kept in memory and written to the database coalesced.

Every node's agent says it is alive every 10 s: at 10,000 nodes one row write per heartbeat is
1,000 database writes a second before a single fault. So a heartbeat only updates this book; the
rows that changed are written in one batch every `flush_seconds`, and sooner (at most once per
`urgent_gap_seconds`) when an agent's liveness changed: first seen, or back after being silent.
An agent going silent writes nothing new (silence is derived from `seen_at`, which is already
written), but it flushes what is pending so every replica sees the same last `seen_at`.

Readers (console, API, `/metrics`) ask the book: the database's rows, overlaid with this
replica's newer memory — the same figures whichever path wrote them, at most one flush behind on
a replica that did not take the heartbeat. The book is loaded from the database on first use, so
a controller restart does not take 10,000 known agents for new ones.

`record` and `flush_due` are cheap and never touch the database; `flush` and `tick` do, from
whichever thread the caller chooses (a background task after a response, the housekeeping loop).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from remediator.clock import Clock
from remediator.model import heartbeats as pacing
from remediator.store.records import AgentStatus
from remediator.store.repository import Repository

log = logging.getLogger(__name__)

DEFAULT_FLUSH_SECONDS = 5.0
# A row is committed up to a flush after its `seen_at` (another replica's, with its clock): rows
# seen this long before the newest one read are read again (replicas' clocks agree far closer).
STORED_OVERLAP = timedelta(seconds=30)
DEFAULT_URGENT_GAP_SECONDS = 1.0


@dataclass(frozen=True)
class FlushStats:
    """What the book has written, for `/metrics` and the benches."""

    flushes: int
    rows: int
    pending: int
    went_silent: int
    came_back: int


class HeartbeatBook:
    """Thread-safe: the web handlers record, one flush runs at a time."""

    def __init__(
        self,
        repository: Repository,
        clock: Clock,
        *,
        silent_after: timedelta,
        flush_seconds: float = DEFAULT_FLUSH_SECONDS,
        urgent_gap_seconds: float = DEFAULT_URGENT_GAP_SECONDS,
        budget_per_second: float | None = None,
        also_flush: Callable[[], object] | None = None,
    ) -> None:
        self._repository = repository
        # Written with each flush, coalesced the same way: the hardware the agents named
        # (ledger/sightings.py), which this package does not import.
        self._also_flush = also_flush
        self._clock = clock
        self.configured_silent_after = silent_after
        self.budget_per_second = budget_per_second
        self.flush_seconds = flush_seconds
        self.urgent_gap_seconds = urgent_gap_seconds
        self._seen: dict[str, AgentStatus] = {}
        # The agents not (yet) silent, oldest heartbeat first (each heartbeat moves its node to
        # the end), so a tick reads only those past the silence bound: scanning all 10,000 every
        # tick was the largest Python cost of an idle controller after the requests themselves.
        # (A wall clock stepped back can only delay a notice, by the step.)
        self._reporting: OrderedDict[str, datetime] = OrderedDict()
        self._dirty: set[str] = set()
        self._silent: set[str] = set()
        self._urgent = False
        self._claimed = False
        self._loaded = False
        self._flushed_at: datetime | None = None
        self._stored_cache: tuple[datetime, dict[str, AgentStatus]] | None = None
        self._stored_newest: datetime | None = None
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.flushes = 0
        self.rows_written = 0
        self.went_silent = 0
        self.came_back = 0

    def asked_period(self) -> float:
        """The least period (s) agents are asked to keep, for the fleet's heartbeat budget
        (model/heartbeats.py); 0 while the fleet is within it at any period."""
        return pacing.asked_period(len(self._seen), self.budget_per_second)

    @property
    def silent_after(self) -> timedelta:
        """Silent after three missed heartbeats of the period asked, never sooner than
        configured."""
        configured = self.configured_silent_after.total_seconds()
        return timedelta(seconds=pacing.silent_after(configured, self.asked_period()))

    # -- the hot path: memory only -----------------------------------------------------------

    def record(
        self,
        node: str,
        *,
        agent: str,
        version: str,
        started_at: datetime,
        stats: Mapping[str, Any],
    ) -> bool:
        """Keep the newest heartbeat of `node` (`seen_at` is our clock, never the agent's).
        True when its liveness changed (first seen, or back from silence): flush soon."""
        self._load()
        now = self._clock.now()
        status = AgentStatus(node, agent, version, started_at, now, dict(stats))
        after = self.silent_after
        with self._lock:
            before = self._seen.get(node)
            changed = before is None or before.silent(now, after)
            if before is not None and changed:
                self.came_back += 1
                log.info("node agent on %s reports again", node)
            self._silent.discard(node)
            self._seen[node] = status
            self._reporting.pop(node, None)
            self._reporting[node] = now
            self._dirty.add(node)
            self._urgent = self._urgent or changed
        return changed

    def flush_due(self) -> bool:
        """Whether a flush should run now: something pending, and either the period is up or a
        liveness change waits and the last flush is at least `urgent_gap_seconds` old."""
        now = self._clock.now()
        with self._lock:
            if not self._dirty:
                return False
            if self._flushed_at is None:
                return True
            age = (now - self._flushed_at).total_seconds()
            return age >= self.flush_seconds or (self._urgent and age >= self.urgent_gap_seconds)

    def claim_flush(self) -> bool:
        """True (once, until that flush ran) when a flush is due: the caller runs `flush`."""
        if self._claimed or not self.flush_due():
            return False
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    # -- the writer ---------------------------------------------------------------------------

    def flush(self) -> int:
        """Write every pending row in one batch, then `also_flush`; returns how many rows. A
        failed write keeps them pending (the next flush tries again) and raises."""
        with self._flush_lock:
            written = self._flush_rows()
            if self._also_flush is not None:
                self._also_flush()
            return written

    def _flush_rows(self) -> int:
        with self._lock:
            rows = [self._seen[node] for node in sorted(self._dirty)]
            self._dirty.clear()
            self._urgent = False
            self._claimed = False
            if not rows:
                return 0
            self._flushed_at = self._clock.now()
        try:
            self._repository.record_heartbeats(rows)
        except Exception:
            with self._lock:
                self._dirty.update(r.node for r in rows if self._seen[r.node] == r)
            raise
        with self._lock:
            self.flushes += 1
            self.rows_written += len(rows)
        return len(rows)

    def tick(self) -> tuple[str, ...]:
        """The periodic pass (any replica's housekeeping): notice agents that went silent
        since the last tick, and flush when due or when one went silent. Returns the newly
        silent nodes."""
        self._load()
        now = self._clock.now()
        after = self.silent_after
        with self._lock:
            newly = tuple(
                sorted(
                    itertools.takewhile(
                        lambda node: now - self._reporting[node] > after, self._reporting
                    )
                )
            )
            for node in newly:
                del self._reporting[node]
            self._silent.update(newly)
            self.went_silent += len(newly)
        for node in newly:
            log.warning("node agent on %s went silent: its node's health is unknown", node)
        if newly or self.flush_due():
            self.flush()
        return newly

    # -- readers -----------------------------------------------------------------------------

    def statuses(self) -> tuple[AgentStatus, ...]:
        """Every agent that ever reported, by node: the stored rows, overlaid with this
        replica's heartbeats as new or newer (a tie is this replica's own write: memory holds at
        least what it flushed)."""
        merged = dict(self._stored())
        with self._lock:
            for node, status in self._seen.items():
                stored = merged.get(node)
                if stored is None or stored.seen_at <= status.seen_at:
                    merged[node] = status
        return tuple(merged[node] for node in sorted(merged))

    def _stored(self) -> dict[str, AgentStatus]:
        """The table's rows, read at most once per flush period: they change no faster (this
        replica's own newer heartbeats are overlaid from memory). After the first read only the
        rows seen since the newest read, less `STORED_OVERLAP`, are read again: all 10,000 were
        ~80 ms of CPU per console view or scrape, and rows are never deleted."""
        now = self._clock.now()
        cached = self._stored_cache
        if cached is not None and (now - cached[0]).total_seconds() < self.flush_seconds:
            return cached[1]
        newest = self._stored_newest
        if cached is None or newest is None:
            read = self._repository.agent_statuses()
            rows = {}
        else:
            read = self._repository.agent_statuses(seen_after=newest - STORED_OVERLAP)
            rows = dict(cached[1])  # readers may hold the last one: a new dict, not a change
        rows.update((s.node, s) for s in read)
        self._stored_newest = max((s.seen_at for s in read), default=newest)
        self._stored_cache = (now, rows)
        return rows

    def status(self, node: str) -> AgentStatus | None:
        stored = self._repository.agent_status(node)
        with self._lock:
            mine = self._seen.get(node)
        if mine is not None and (stored is None or stored.seen_at <= mine.seen_at):
            return mine
        return stored

    def stats(self) -> FlushStats:
        with self._lock:
            return FlushStats(
                self.flushes, self.rows_written, len(self._dirty), self.went_silent, self.came_back
            )

    def _load(self) -> None:
        """Known agents from the database, once: after a restart their first heartbeat is not
        news (a liveness change would ask for an at-once flush, 10,000 times)."""
        if self._loaded:
            return
        stored = self._repository.agent_statuses()
        now = self._clock.now()
        configured = self.configured_silent_after.total_seconds()
        asked = pacing.asked_period(len(stored), self.budget_per_second)
        after = timedelta(seconds=pacing.silent_after(configured, asked))
        with self._lock:
            if self._loaded:
                return
            for status in sorted(stored, key=lambda s: s.seen_at):
                if status.node in self._seen:
                    continue
                self._seen[status.node] = status
                if status.silent(now, after):
                    self._silent.add(status.node)
                else:
                    self._reporting[status.node] = status.seen_at
            self._flushed_at = now  # the first flush comes a period (or an urgent gap) on
            self._loaded = True
