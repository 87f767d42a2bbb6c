"""A client-side token bucket for Kubernetes API requests, as client-go's (`QPS` and `Burst`).

One bucket is shared by every job of a replica, so a 100-pod drain and a poll of 2,000 nodes
together never ask more of a struggling apiserver than the configured rate; a request waits for
its token instead of being refused. `wait_seconds` is the pure decision; `take` the thin executor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float
    at: float  # monotonic time the tokens were counted


def refill(bucket: Bucket, now: float, qps: float, burst: int) -> Bucket:
    return Bucket(min(float(burst), bucket.tokens + (now - bucket.at) * qps), now)


def wait_seconds(bucket: Bucket, now: float, qps: float, burst: int) -> tuple[Bucket, float]:
    """Spend one token (going into debt when there is none): the new bucket, and how long the
    request must wait for the token it spent."""
    current = refill(bucket, now, qps, burst)
    spent = Bucket(current.tokens - 1.0, now)
    return spent, max(0.0, -spent.tokens / qps)


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self.qps, self.burst = qps, burst
        self._monotonic, self._sleep = monotonic, sleep
        self._bucket = Bucket(float(burst), monotonic())
        self._lock = threading.Lock()
        self.waited_seconds = 0.0  # total time requests spent waiting, for metrics and benches

    def full_in(self) -> float:
        """Seconds until the bucket holds `burst` tokens again (0: it does now)."""
        with self._lock:
            current = refill(self._bucket, self._monotonic(), self.qps, self.burst)
        return (self.burst - current.tokens) / self.qps

    def take(self) -> float:
        """Block until this request may go; returns how long it waited."""
        with self._lock:
            self._bucket, wait = wait_seconds(self._bucket, self._monotonic(), self.qps, self.burst)
            self.waited_seconds += wait
        if wait > 0:
            self._sleep(wait)
        return wait
