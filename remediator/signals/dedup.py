"""Folding duplicate signals, so one fault counts once.

Sources repeat themselves: DCGM keeps reporting the last XID as long as the exporter runs, an
`increase(...[W]) > 0` query answers for its whole window W after one NVLink burst, Alertmanager
re-sends a firing group every `repeat_interval`. Counted naively, one XID 79 would look like a
burst of them. So *event* kinds are folded: a signal whose key (node, GPU, kind, code) was let
through less than `window` ago is dropped. The GPU is its UUID when the signal carries one, else
its index (`Signal.dedup_key`). After the window it passes again — a fault that is
still there is re-announced once per window rather than hidden forever (for instance after a
budget held the first decision).

*Reading* kinds are never folded: a thermal reading is a measurement, and a node condition is
a state that holds while it is reported, as is an announced maintenance (one signal per event
per poll: signals/maintenance.py keeps the events apart by their id). Policies apply `for:` and
hysteresis to them, which needs every reading; folding would make a five-minute streak look like
a gap.

Windows are per kind, because "one occurrence" lasts as long as its source keeps answering for
it. A counter-derived kind (NVLink: `increase(...[W]) > 0`) must fold for exactly the query's
window W: shorter and one burst counts twice, longer and a lasting error stream yields too few
events for a burst policy to ever see three. Gauge kinds (the XID gauge holds its code) fold for
the general window; evaluate does not count their re-announcements toward bursts at all.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from operator import attrgetter

from remediator.signals.model import Signal, SignalKind

READING_KINDS: frozenset[SignalKind] = frozenset(
    {
        SignalKind.THERMAL,
        SignalKind.NODE_CONDITION,
        SignalKind.SLURM_NODE,
        SignalKind.MAINTENANCE,
        SignalKind.UNVALIDATED,
    }
)

# Kinds whose every emission reports new errors (a counter rose within the query window), so a
# burst counts each one; other event kinds report a lasting state, re-announced once per window.
COUNTER_KINDS: frozenset[SignalKind] = frozenset({SignalKind.NVLINK})
# The Prometheus source's counter queries look back this far (PrometheusQueries.nvlink).
COUNTER_WINDOW = timedelta(minutes=2)
DEFAULT_KIND_WINDOWS: Mapping[SignalKind, timedelta] = {SignalKind.NVLINK: COUNTER_WINDOW}

DedupKey = tuple[str, int | str | None, SignalKind, int | None]


def fold(
    signals: Iterable[Signal],
    window: timedelta,
    last_emitted: Mapping[DedupKey, datetime] | None = None,
    windows: Mapping[SignalKind, timedelta] | None = None,
) -> tuple[tuple[Signal, ...], dict[DedupKey, datetime]]:
    """Drop event signals whose key was emitted within its kind's window (`windows`, else
    `window`), in `last_emitted` or earlier in this batch. Returns the survivors in time order
    and the updated emission times."""
    emitted: list[Signal] = []
    state: dict[DedupKey, datetime] = dict(last_emitted or {})
    per_kind = windows or {}
    for signal in sorted(signals, key=attrgetter("observed_at")):
        if signal.kind in READING_KINDS:
            emitted.append(signal)
            continue
        key = signal.dedup_key
        last = state.get(key)
        if last is not None and abs(signal.observed_at - last) < per_kind.get(signal.kind, window):
            continue
        state[key] = signal.observed_at
        emitted.append(signal)
    return tuple(emitted), state


class SignalFolder:
    """`fold` with memory across cycles. Keys expire their kind's window after their last
    emission, and at most `max_keys` are kept (the oldest go first: forgetting a key can only let
    a duplicate through, never hide a fault). `windows` overrides `window` per kind and defaults
    to DEFAULT_KIND_WINDOWS, which matches the Prometheus source's default queries."""

    def __init__(
        self,
        window: timedelta,
        max_keys: int = 100_000,
        windows: Mapping[SignalKind, timedelta] = DEFAULT_KIND_WINDOWS,
    ) -> None:
        if window <= timedelta(0) or any(w <= timedelta(0) for w in windows.values()):
            raise ValueError("windows must be positive")
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        self.window = window
        self.windows = dict(windows)
        self.max_keys = max_keys
        self._last: dict[DedupKey, datetime] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._last)

    def last_taken(self, signal: Signal) -> tuple[datetime, timedelta] | None:
        """When the signal's key was last let through, and its kind's window: what a folded
        signal was folded into."""
        with self._lock:
            at = self._last.get(signal.dedup_key)
        return None if at is None else (at, self.windows.get(signal.kind, self.window))

    def fold(self, signals: Iterable[Signal], now: datetime) -> tuple[Signal, ...]:
        """The signals that are new: not a repeat of one emitted within the window."""
        with self._lock:
            live = {
                key: at
                for key, at in self._last.items()
                if at > now - self.windows.get(key[2], self.window)
            }
            emitted, state = fold(signals, self.window, live, self.windows)
            if len(state) > self.max_keys:
                newest = sorted(state.items(), key=lambda item: item[1])[-self.max_keys :]
                state = dict(newest)
            self._last = state
            return emitted
