"""Every provider call is counted by operation and result, with its latency, whatever the
adapter behind it answers or raises."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from remediator.errors import PermanentError, TransientError
from remediator.providers.base import Operation, OperationState
from remediator.providers.instrumented import InstrumentedProvider, ProviderMetrics, result_of


class Pool:
    """A node pool with one spare node that refuses a second replacement."""

    def __init__(self) -> None:
        self.spare = 1

    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        if self.spare == 0:
            raise PermanentError(f"pool {pool} has no spare node")
        self.spare -= 1
        return self.get_operation("op-1")

    def get_operation(self, op_id: str) -> Operation:
        if op_id != "op-1":
            raise TransientError(f"operation {op_id} not visible yet", delay=1.0)
        return Operation(id=op_id, pool="a", node="n1", state=OperationState.PROVISIONING)

    def spare_capacity(self, pool: str) -> int | None:
        return self.spare


def test_calls_are_counted_by_operation_and_result() -> None:
    registry = CollectorRegistry()
    provider = InstrumentedProvider(Pool(), ProviderMetrics(registry))
    assert provider.spare_capacity("a") == 1
    assert provider.request_replacement("a", "n1", "k", "xid 79").id == "op-1"
    with pytest.raises(PermanentError):
        provider.request_replacement("a", "n2", "k2", "xid 79")
    with pytest.raises(TransientError):
        provider.get_operation("op-2")

    def count(operation: str, result: str) -> float | None:
        return registry.get_sample_value(
            "remediator_provider_call_duration_seconds_count",
            {"operation": operation, "result": result},
        )

    assert count("spare_capacity", "ok") == 1
    assert count("request_replacement", "ok") == 1
    assert count("request_replacement", "permanent") == 1
    assert count("get_operation", "transient") == 1
    assert count("get_operation", "ok") is None


def test_result_names() -> None:
    assert result_of(None) == "ok"
    assert result_of(ValueError("bug")) == "crash"
