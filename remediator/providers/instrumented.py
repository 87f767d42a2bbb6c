"""A node-pool provider wrapped with its metrics: every call counted by operation and result,
with its latency, whatever platform is behind it. The controller wraps the provider it builds,
so each adapter stays free of metrics code."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry, Histogram

from remediator.errors import PermanentError, RemediatorError, TransientError
from remediator.providers.base import (
    NodePoolProvider,
    Operation,
    RebootReceipt,
    request_rack_operation,
    trigger_maintenance,
)

T = TypeVar("T")
# Calls take from a few milliseconds to the client's timeout and retries (tens of seconds).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def result_of(exc: BaseException | None) -> str:
    """ok, or the kind of error: transient (retried later), permanent, error (ours), crash."""
    if exc is None:
        return "ok"
    if isinstance(exc, TransientError):
        return "transient"
    if isinstance(exc, PermanentError):
        return "permanent"
    return "error" if isinstance(exc, RemediatorError) else "crash"


class ProviderMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Histogram(
            "remediator_provider_call_duration_seconds",
            "Node-pool provider calls by operation and result, with their latency (the "
            "histogram's _count is the number of calls).",
            ["operation", "result"],
            buckets=BUCKETS,
            registry=registry,
        )


class InstrumentedProvider:
    def __init__(self, inner: NodePoolProvider, metrics: ProviderMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    def _timed(self, operation: str, call: Callable[[], T]) -> T:
        started = time.monotonic()
        failure: BaseException | None = None
        try:
            return call()
        except BaseException as exc:
            failure = exc
            raise
        finally:
            elapsed = time.monotonic() - started
            self._metrics.calls.labels(operation, result_of(failure)).observe(elapsed)

    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        return self._timed(
            "request_replacement",
            lambda: self._inner.request_replacement(pool, node, idempotency_key, reason),
        )

    def get_operation(self, op_id: str) -> Operation:
        return self._timed("get_operation", lambda: self._inner.get_operation(op_id))

    def spare_capacity(self, pool: str) -> int | None:
        return self._timed("spare_capacity", lambda: self._inner.spare_capacity(pool))

    def reboot(self, pool: str, node: str, idempotency_key: str, reason: str) -> RebootReceipt:
        return self._timed(
            "reboot", lambda: self._inner.reboot(pool, node, idempotency_key, reason)
        )

    def trigger_maintenance(
        self, pool: str, node: str, event: str, idempotency_key: str, reason: str
    ) -> RebootReceipt:
        return self._timed(
            "trigger_maintenance",
            lambda: trigger_maintenance(self._inner, pool, node, event, idempotency_key, reason),
        )

    def request_rack_operation(
        self, pool: str, rack: str, action: str, idempotency_key: str, reason: str
    ) -> Operation:
        return self._timed(
            "request_rack_operation",
            lambda: request_rack_operation(
                self._inner, pool, rack, action, idempotency_key, reason
            ),
        )
