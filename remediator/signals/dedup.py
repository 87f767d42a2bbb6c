"""Folding duplicate signals, so one fault counts once.

Sources repeat themselves: DCGM keeps reporting the last XID as long as the exporter runs, an
`increase(...[5m]) > 0` query answers for five minutes after one NVLink burst, Alertmanager
re-sends a firing group every `repeat_interval`. Counted naively, one XID 79 would look like a
burst of them. So *event* kinds are folded: a signal whose key (node, GPU, kind, code) was let
through less than `window` ago is dropped. After the window it passes again — a fault that is
still there is re-announced once per window rather than hidden forever (for instance after a
budget held the first decision).

*Reading* kinds are never folded: a thermal reading is a measurement, and a node condition is
a state that holds while it is reported. Policies apply `for:` and hysteresis to them, which
needs every reading; folding would make a five-minute streak look like a gap.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from operator import attrgetter

from remediator.signals.model import Signal, SignalKind

READING_KINDS: frozenset[SignalKind] = frozenset({SignalKind.THERMAL, SignalKind.NODE_CONDITION})

DedupKey = tuple[str, int | None, SignalKind, int | None]


def fold(
    signals: Iterable[Signal],
    window: timedelta,
    last_emitted: Mapping[DedupKey, datetime] | None = None,
) -> tuple[tuple[Signal, ...], dict[DedupKey, datetime]]:
    """Drop event signals whose key was emitted within `window` (in `last_emitted` or earlier
    in this batch). Returns the survivors in time order and the updated emission times."""
    emitted: list[Signal] = []
    state: dict[DedupKey, datetime] = dict(last_emitted or {})
    for signal in sorted(signals, key=attrgetter("observed_at")):
        if signal.kind in READING_KINDS:
            emitted.append(signal)
            continue
        key = signal.dedup_key
        last = state.get(key)
        if last is not None and abs(signal.observed_at - last) < window:
            continue
        state[key] = signal.observed_at
        emitted.append(signal)
    return tuple(emitted), state


class SignalFolder:
    """`fold` with memory across cycles. Keys expire `window` after their last emission, and
    at most `max_keys` are kept (the oldest go first: forgetting a key can only let a duplicate
    through, never hide a fault)."""

    def __init__(self, window: timedelta, max_keys: int = 100_000) -> None:
        if window <= timedelta(0):
            raise ValueError("window must be positive")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self.window = window
        self.max_keys = max_keys
        self._last: dict[DedupKey, datetime] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._last)

    def fold(self, signals: Iterable[Signal], now: datetime) -> tuple[Signal, ...]:
        """The signals that are new: not a repeat of one emitted within the window."""
        with self._lock:
            horizon = now - self.window
            live = {k: at for k, at in self._last.items() if at > horizon}
            emitted, state = fold(signals, self.window, live)
            if len(state) > self.max_keys:
                newest = sorted(state.items(), key=lambda item: item[1])[-self.max_keys :]
                state = dict(newest)
            self._last = state
            return emitted
