"""What the fault runner tells the checker, and what the checker found: shared by both threads.

The fault runner records what it did that the checker must allow for: when the controllers could
not act (a database outage, a killed leader, a sick Kubernetes API: a `Disturbance`), which
fences a human took off (and when slurmctld forgot its drains), and each signal it planted, which
must get a visible disposition (I6). Time given to a disturbance does not count toward a grace:
an invariant's clock runs only while the controllers could have acted.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

# After a disturbance ends the controllers need a moment: a new leader takes the expired lease
# (6 s), an informer relists, a database pool reconnects.
RECOVERY_SECONDS = 15.0


@dataclass
class Disturbance:
    kind: str
    start: float
    end: float | None = None


@dataclass
class Planted:
    """A signal the soak planted on `node` at `at` (monotonic; `wall` the same instant in UTC)."""

    node: str
    at: float
    wall: datetime
    what: str
    resolved: str | None = None  # the disposition found, once found
    latency: float | None = None


@dataclass(frozen=True)
class Violation:
    invariant: str
    node: str
    minute: float
    what: str


@dataclass
class Journal:
    seed: int
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)
    disturbances: list[Disturbance] = field(default_factory=list)
    touched: dict[str, float] = field(default_factory=dict)
    slurm_cleaned: list[float] = field(default_factory=list)
    planted: list[Planted] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    checks: Counter[str] = field(default_factory=Counter)
    reasserted: list[float] = field(default_factory=list)  # I3: seconds to fence again
    not_due: int = 0  # I3: touches of a fence no longer due by the next poll
    errors: list[str] = field(default_factory=list)  # the soak did not go as modelled
    _reported: set[tuple[str, ...]] = field(default_factory=set)

    def minute(self, now: float | None = None) -> float:
        return ((time.monotonic() if now is None else now) - self.started) / 60.0

    # -- what the fault runner did -------------------------------------------------------

    def disturb(self, kind: str) -> Disturbance:
        found = Disturbance(kind, time.monotonic())
        with self.lock:
            self.disturbances.append(found)
        return found

    def settle(self, disturbance: Disturbance) -> None:
        with self.lock:
            disturbance.end = time.monotonic()

    def touch(self, node: str) -> None:
        with self.lock:
            self.touched[node] = time.monotonic()

    def cleaned_slurm(self) -> None:
        with self.lock:
            self.slurm_cleaned.append(time.monotonic())

    def plant(self, node: str, what: str) -> None:
        with self.lock:
            self.planted.append(Planted(node, time.monotonic(), datetime.now(UTC), what))

    def error(self, text: str) -> None:
        print(f"soak: {text}", flush=True)
        with self.lock:
            self.errors.append(text)

    # -- clocks for the checker --------------------------------------------------------------

    def disturbed(self, start: float, end: float) -> float:
        """Seconds of [start, end] during which the controllers could not act (disturbances
        merged, each extended by RECOVERY_SECONDS)."""
        with self.lock:
            spans = sorted(
                (d.start, (end if d.end is None else d.end) + RECOVERY_SECONDS)
                for d in self.disturbances
            )
        total, reach = 0.0, start
        for lo, hi in spans:
            lo, hi = max(lo, reach), min(hi, end)
            if hi > lo:
                total += hi - lo
                reach = hi
        return total

    def effective(self, since: float, now: float) -> float:
        """Seconds since `since` the controllers could have acted in."""
        return (now - since) - self.disturbed(since, now)

    def touched_since(self, node: str, since: float) -> float | None:
        with self.lock:
            at = self.touched.get(node)
        return at if at is not None and at >= since else None

    def slurm_cleaned_since(self, since: float) -> bool:
        with self.lock:
            return any(at >= since for at in self.slurm_cleaned)

    # -- findings ----------------------------------------------------------------------------

    def check(self, invariant: str, count: int = 1) -> None:
        with self.lock:
            self.checks[invariant] += count

    def violation(self, invariant: str, node: str, what: str, key: tuple[str, ...] = ()) -> None:
        """Print it at once; a condition that lasts is reported once (per `key`)."""
        ident = (invariant, node, *key)
        with self.lock:
            if ident in self._reported:
                return
            self._reported.add(ident)
            found = Violation(invariant, node, round(self.minute(), 2), what)
            self.violations.append(found)
        print(
            f"VIOLATION {invariant} node={node} minute={found.minute:.2f} seed={self.seed}: {what}",
            flush=True,
        )
        sys.stdout.flush()
