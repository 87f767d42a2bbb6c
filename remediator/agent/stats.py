"""The agent's counters, shared by its threads; sent with every heartbeat."""

from __future__ import annotations

import threading


class Stats:
    NAMES = (
        "records_read",
        "records_skipped",
        "records_lost",
        "log_restarts",
        "xid_lines_unparsed",
        "sxid_lines_unparsed",
        "signals_queued",
        "signals_sent",
        "signals_refused",
        "signals_dropped",
        "push_errors",
        "heartbeat_errors",
        "presence_unknown",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(self.NAMES, 0)

    def add(self, name: str, count: int = 1) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0) + count

    def set(self, name: str, value: int) -> None:
        with self._lock:
            self._values[name] = value

    def get(self, name: str) -> int:
        with self._lock:
            return self._values.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)
