"""The agent's durable state: the signals not yet delivered and the kernel-log position.

One SQLite file (stdlib, fsync'd): a batch of new signals and the position of the record that
produced them are committed in one transaction, so after a crash or restart a record is either
queued and passed, or neither — no duplicate report, no lost one. The queue is bounded: past
`capacity` the oldest undelivered signals are dropped and counted (a controller down for hours
must not fill the node's disk); everything fits while it is down for minutes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS queue (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class DurableQueue:
    def __init__(self, path: Path, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.capacity = capacity
        self.dropped = 0
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT count(*) FROM queue").fetchone()
            return int(count)

    def commit(self, signals: Sequence[dict[str, Any]], state: dict[str, str]) -> None:
        """Queue `signals` and set `state` together, or neither."""
        if not signals and not state:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT INTO queue (body) VALUES (?)",
                    [(json.dumps(s, separators=(",", ":")),) for s in signals],
                )
                self._db.executemany(
                    "INSERT INTO state (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    list(state.items()),
                )
                self.dropped += self._trim()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _trim(self) -> int:
        (count,) = self._db.execute("SELECT count(*) FROM queue").fetchone()
        excess = int(count) - self.capacity
        if excess > 0:
            self._db.execute(
                "DELETE FROM queue WHERE id IN (SELECT id FROM queue ORDER BY id LIMIT ?)",
                (excess,),
            )
        return max(0, excess)

    def peek(self, limit: int) -> list[tuple[int, dict[str, Any]]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, body FROM queue ORDER BY id LIMIT ?", (limit,)
            ).fetchall()
        return [(int(row_id), json.loads(body)) for row_id, body in rows]

    def remove(self, ids: Sequence[int]) -> None:
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        with self._lock:
            self._db.execute(f"DELETE FROM queue WHERE id IN ({marks})", list(ids))

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def close(self) -> None:
        with self._lock:
            self._db.close()
