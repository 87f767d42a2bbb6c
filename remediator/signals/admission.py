"""Admission on the push path: who may send now, decided before anything is stored.

Two separate lanes, so a signal never waits behind heartbeats: heartbeats only touch memory
(`store.heartbeats`) and have their own limits; signals go to the inbox, drained in arrival order.
Each lane has a token bucket per node (a loop gone wrong on one node is refused, the others go
on), and heartbeats have one more for the whole replica: past it the server is behind, and says
so with 429 and a Retry-After spread over a few seconds so the agents it turned away do not come
back together. Every refusal is counted by lane, reason and node (the node's count is what the
console shows; the reason's is on `/metrics`).

`decide` is pure over a `Bucket`; `Admission` keeps the buckets (thread-safe) and the counts.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from remediator.kube.ratelimit import Bucket, refill


class Lane(StrEnum):
    HEARTBEAT = "heartbeat"
    SIGNALS = "signals"


class Refusal(StrEnum):
    NODE_RATE = "node_rate"  # this node sends faster than its lane allows
    OVERLOADED = "overloaded"  # the replica takes no more heartbeats this second
    UNKNOWN_NODE = "unknown_node"  # no such node in the cluster
    GPU_OUT_OF_RANGE = "gpu_out_of_range"  # a GPU index beyond the node's GPUs


@dataclass(frozen=True)
class Limit:
    rate: float  # tokens per second
    burst: float


@dataclass(frozen=True)
class Limits:
    """Defaults: an agent heartbeats every 10 s (a burst of 3 covers a restart and a retry); a
    node's kernel can log a burst of XIDs, so a node may push 200 signals at once and 20/s after;
    one replica takes 2,000 heartbeats a second (10,000 agents at 10 s are 1,000)."""

    heartbeat_per_node: Limit = Limit(rate=0.5, burst=3)
    signals_per_node: Limit = Limit(rate=20.0, burst=200)
    heartbeats: Limit = Limit(rate=2_000.0, burst=2_000)


def decide(bucket: Bucket, now: float, limit: Limit, cost: float) -> tuple[Bucket, float]:
    """Spend `cost` tokens if there are enough: (the bucket after, 0). Otherwise spend nothing:
    (the bucket refilled, seconds until there would be enough)."""
    current = refill(bucket, now, limit.rate, math.ceil(limit.burst))
    if current.tokens >= cost:
        return Bucket(current.tokens - cost, now), 0.0
    return current, (min(cost, limit.burst) - current.tokens) / limit.rate


def retry_after(wait: float, spread: float = 0.0) -> int:
    """Whole seconds for the Retry-After header: at least 1, plus up to `spread` at random."""
    return max(1, math.ceil(wait + random.uniform(0.0, spread)))


class Admission:
    """Buckets per (lane, node) and one for the replica's heartbeats; at most `max_nodes`
    remembered per lane (forgetting one only gives it a fresh burst)."""

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        max_nodes: int = 200_000,
    ) -> None:
        self.limits = limits or Limits()
        self._monotonic = monotonic
        self._max_nodes = max_nodes
        self._nodes: dict[Lane, dict[str, Bucket]] = {lane: {} for lane in Lane}
        start = monotonic()
        self._replica = Bucket(float(self.limits.heartbeats.burst), start)
        self._lock = threading.Lock()
        self.refused: Counter[tuple[Lane, Refusal]] = Counter()
        self.refused_by_node: Counter[tuple[Lane, str]] = Counter()
        self.admitted: Counter[Lane] = Counter()

    def heartbeat(self, node: str) -> tuple[Refusal, float] | None:
        """None: take it. Otherwise why not and how many seconds until it would be taken."""
        with self._lock:
            now = self._monotonic()
            refused = self._node(Lane.HEARTBEAT, node, now, self.limits.heartbeat_per_node, 1.0)
            if refused is None:
                self._replica, wait = decide(self._replica, now, self.limits.heartbeats, 1.0)
                if wait > 0:
                    refused = (Refusal.OVERLOADED, wait)
            return self._count(Lane.HEARTBEAT, node, refused)

    def signals(self, node: str, count: int) -> tuple[Refusal, float] | None:
        """`count` signals naming `node` in one request: all taken, or none."""
        with self._lock:
            now = self._monotonic()
            limit = self.limits.signals_per_node
            refused = self._node(Lane.SIGNALS, node, now, limit, float(count))
            return self._count(Lane.SIGNALS, node, refused, count)

    def count(self, lane: Lane, node: str, reason: Refusal, count: int = 1) -> None:
        """A refusal decided elsewhere (an unknown node, a GPU it lacks), counted with the
        rest."""
        with self._lock:
            self._count(lane, node, (reason, 0.0), count)

    def _node(
        self, lane: Lane, node: str, now: float, limit: Limit, cost: float
    ) -> tuple[Refusal, float] | None:
        buckets = self._nodes[lane]
        bucket = buckets.get(node) or Bucket(float(limit.burst), now)
        buckets[node], wait = decide(bucket, now, limit, cost)
        if len(buckets) > self._max_nodes:
            del buckets[next(iter(buckets))]
        return (Refusal.NODE_RATE, wait) if wait > 0 else None

    def _count(
        self, lane: Lane, node: str, refused: tuple[Refusal, float] | None, count: int = 1
    ) -> tuple[Refusal, float] | None:
        if refused is None:
            self.admitted[lane] += count
        else:
            self.refused[(lane, refused[0])] += count
            key = (lane, node)
            if key in self.refused_by_node or len(self.refused_by_node) < self._max_nodes:
                self.refused_by_node[key] += count
        return refused

    def snapshot(self) -> tuple[dict[str, int], dict[str, dict[str, int]], list[tuple[str, int]]]:
        """(admitted by lane, refused by lane and reason, the 20 most refused nodes)."""
        with self._lock:
            admitted = {lane.value: self.admitted[lane] for lane in Lane}
            refused: dict[str, dict[str, int]] = {lane.value: {} for lane in Lane}
            for (lane, reason), n in self.refused.items():
                refused[lane.value][reason.value] = n
            by_node: Counter[str] = Counter()
            for (_lane, node), n in self.refused_by_node.items():
                by_node[node] += n
            return admitted, refused, by_node.most_common(20)
