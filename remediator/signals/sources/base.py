"""The one interface every signal source implements, and how a source reports its own health.

The rule every source keeps: never a false "healthy" and never a false fault. A source that
cannot answer (its backend is down, errors, or serves stale data) returns no signals and
`up=False` with the reason, so the controller can tell "nothing is wrong" from "I cannot see".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from remediator.signals.model import Signal


@dataclass(frozen=True, slots=True)
class SourceHealth:
    name: str
    up: bool
    checked_at: datetime
    last_success_at: datetime | None
    error: str | None = None
    detail: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SourceResult:
    signals: tuple[Signal, ...]
    health: SourceHealth


class Source(Protocol):
    name: str

    def poll(self, now: datetime) -> SourceResult:
        """Observe once; must not raise for backend failures (report them in `health`)."""
        ...


class HealthTracker:
    """Remembers the last successful poll so that a failure can say how long we have been blind."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_success_at: datetime | None = None

    def ok(
        self, now: datetime, signals: tuple[Signal, ...], detail: dict[str, str] | None = None
    ) -> SourceResult:
        self.last_success_at = now
        health = SourceHealth(self.name, True, now, now, None, detail or {})
        return SourceResult(signals, health)

    def down(self, now: datetime, error: str, detail: dict[str, str] | None = None) -> SourceResult:
        health = SourceHealth(self.name, False, now, self.last_success_at, error, detail or {})
        return SourceResult((), health)
