"""The signals the node page never listed, counted onto the row it does (#39 item 9).

The intake stores each (node, GPU, kind, code) at most once per fold window: a source that
repeats a lasting fault every scrape would otherwise write a row per scrape. The later ones were
accepted with a 202 and then shown nowhere. Each is now counted onto the row stored for its key
in the window: the row's disposition ends "; and N more until T" (T: the newest one's
observed_at), naming their own dispositions by class when any differs from the row's
("; and 3 more (2 folded, 1 joined) until T"). Pure: the intake writes what `changed` returns.

The count lives in the intake's memory, like the window itself: a restarted controller starts
a new row for a key at its next signal rather than adding to the old one."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from remediator.signals.dedup import DedupKey
from remediator.signals.model import Signal

MAX_TEXT = 512  # the stored disposition's length (store/models.py ObservedSignal.disposition)


@dataclass
class Row:
    """The row stored for a key in the window, and what was counted onto it."""

    signal: Signal
    kind: str  # its disposition's class (opened, folded, joined, …)
    text: str | None
    stored_at: datetime
    more: Counter[str] = field(default_factory=Counter)
    until: datetime | None = None

    def disposition(self) -> str | None:
        """The row's text with its count; the count is never cut off by the column's length."""
        count = sum(self.more.values())
        if not count or self.until is None:
            return self.text
        named = [f"{n} {k or 'without a disposition'}" for k, n in self.more.most_common()]
        mixed = any(k != self.kind for k in self.more)
        classes = f" ({', '.join(named)})" if mixed else ""
        counted = f"and {count} more{classes} until {self.until.isoformat()}"
        if not self.text:
            return counted
        suffix = f"; {counted}"
        return self.text[: MAX_TEXT - len(suffix)] + suffix


class StoredRows:
    """Which keys have their row in the window, and the signals counted onto each since."""

    def __init__(self, window: timedelta) -> None:
        self.window = window
        self._rows: dict[DedupKey, Row] = {}
        self._changed: set[DedupKey] = set()

    def __len__(self) -> int:
        return len(self._rows)

    def take(self, signal: Signal, said: tuple[str, str | None], now: datetime) -> bool:
        """True when the signal gets a row of its own (its key has none in the window); else it
        is counted onto the key's row."""
        horizon = now - self.window
        key = signal.dedup_key
        row = self._rows.get(key)
        if row is None or row.stored_at <= horizon:
            self._rows[key] = Row(signal, said[0], said[1], now)
            self._changed.discard(key)
            return True
        row.more[said[0]] += 1
        row.until = max(row.until or signal.observed_at, signal.observed_at)
        self._changed.add(key)
        return False

    def text_of(self, signal: Signal) -> str | None:
        """The disposition a row stored now is written with (counted repeats of the same batch
        included)."""
        row = self._rows[signal.dedup_key]
        self._changed.discard(signal.dedup_key)
        return row.disposition()

    def changed(self) -> list[tuple[Signal, str | None]]:
        """Rows stored before whose count moved since the last call: (its signal, its text)."""
        out = [(self._rows[k].signal, self._rows[k].disposition()) for k in self._changed]
        self._changed.clear()
        return out

    def expire(self, now: datetime) -> None:
        """Forget the rows whose window is over: their key's next signal gets a row again."""
        horizon = now - self.window
        self._rows = {k: r for k, r in self._rows.items() if r.stored_at > horizon}
        self._changed &= self._rows.keys()
