"""Signals the cluster cannot have, dropped before evaluation.

A shared Alertmanager, a Prometheus that still scrapes old hosts or a pusher with a typo can
name nodes this cluster does not have. Evaluated, they become decisions that count toward the
storm breaker: fifty alerts for unknown nodes tripped it on an 8-node cluster and held a real
XID 79. So the intake screens every signal against the node list first: a node it does not
know, or a GPU index beyond the node's GPUs (when its capacity says how many), is dropped with
the reason and counted (`remediator_signals_dropped_total{source,reason}`), never evaluated or
stored.
`screen` is pure (the caller passes the node list it already has); `RecentDrops` tells which
drops are news, so a repeated bad signal is logged and counted once per window.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from remediator.signals.bounds import gpu_problem
from remediator.signals.model import Signal


class DropReason(StrEnum):
    UNKNOWN_NODE = "unknown_node"
    GPU_OUT_OF_RANGE = "gpu_out_of_range"
    # A cloud's maintenance event on an instance that is no Node of this cluster (counted by the
    # maintenance sources, once per event: signals/sources/aws_maintenance.py).
    UNKNOWN_INSTANCE = "unknown_instance"


@dataclass(frozen=True, slots=True)
class Dropped:
    signal: Signal
    reason: DropReason
    detail: str


@dataclass(frozen=True, slots=True)
class Screened:
    kept: tuple[Signal, ...]
    dropped: tuple[Dropped, ...]

    def counts(self) -> dict[DropReason, int]:
        return dict(Counter(d.reason for d in self.dropped))


def screen(signals: Iterable[Signal], gpus: Mapping[str, int | None]) -> Screened:
    """`gpus` maps every node the cluster has to its GPU count (None when unknown)."""
    kept: list[Signal] = []
    dropped: list[Dropped] = []
    for signal in signals:
        if signal.node not in gpus:
            detail = f"{signal.node}: no such node in the cluster"
            dropped.append(Dropped(signal, DropReason.UNKNOWN_NODE, detail))
            continue
        problem = gpu_problem(signal.gpu, gpus[signal.node])
        if problem is not None:
            detail = f"{signal.node}: {problem}"
            dropped.append(Dropped(signal, DropReason.GPU_OUT_OF_RANGE, detail))
            continue
        kept.append(signal)
    return Screened(tuple(kept), tuple(dropped))


DropKey = tuple[DropReason, str, int | None, str, int | None]


class RecentDrops:
    """Which drops are news. Sources repeat themselves (a held alert is re-announced at every
    poll, a series at every scrape), so each (reason, node, GPU, kind, code) is counted and
    logged once per `window`: the counter then says how many distinct bad signals came in, and
    a lasting one is still seen again once a window. Thread-safe; at most `max_keys` remembered
    (forgetting one can only count it twice)."""

    def __init__(self, window: timedelta = timedelta(minutes=5), max_keys: int = 100_000) -> None:
        self.window = window
        self.max_keys = max_keys
        self._seen: dict[DropKey, datetime] = {}
        self._lock = threading.Lock()

    def news(self, dropped: Iterable[Dropped], now: datetime) -> tuple[Dropped, ...]:
        fresh: list[Dropped] = []
        with self._lock:
            horizon = now - self.window
            self._seen = {k: at for k, at in self._seen.items() if at > horizon}
            for item in dropped:
                s = item.signal
                key = (item.reason, s.node, s.gpu, s.kind.value, s.code)
                if key in self._seen:
                    continue
                self._seen[key] = now
                fresh.append(item)
            while len(self._seen) > self.max_keys:
                del self._seen[next(iter(self._seen))]
        return tuple(fresh)


def summary(dropped: Iterable[Dropped], examples: int = 5) -> str:
    """One log line's worth: counts per reason and the first few details."""
    items = list(dropped)
    counts = Counter(d.reason.value for d in items)
    shown = "; ".join(d.detail for d in items[:examples])
    more = f" (and {len(items) - examples} more)" if len(items) > examples else ""
    return f"{dict(sorted(counts.items()))}: {shown}{more}"
