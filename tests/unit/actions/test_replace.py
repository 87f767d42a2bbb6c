"""How a provider operation and a capacity answer become outcomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from remediator.actions.outcome import Done, Failed, Held, Waiting
from remediator.actions.replace import check_capacity, judge_operation
from remediator.providers.base import Operation, OperationState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def op(state: OperationState, new_node: str | None = None, error: str | None = None) -> Operation:
    return Operation("op-1", "pool-a", "gpu-1", state, new_node, error)


class FixedCapacity:
    def __init__(self, spare: int | None) -> None:
        self.spare = spare

    def request_replacement(self, pool: str, node: str, key: str, reason: str) -> Operation:
        raise AssertionError("check_capacity must not request anything")

    def get_operation(self, op_id: str) -> Operation:
        raise AssertionError("check_capacity must not poll")

    def spare_capacity(self, pool: str) -> int | None:
        return self.spare


def test_succeeded_names_the_new_node() -> None:
    out = judge_operation(op(OperationState.SUCCEEDED, "gpu-9"), started_at=T0, now=T0, timeout=60)
    assert isinstance(out, Done)
    assert out.facts["new_node"] == "gpu-9" and out.facts["operation_id"] == "op-1"


def test_succeeded_without_a_node_is_a_failure() -> None:
    out = judge_operation(op(OperationState.SUCCEEDED), started_at=T0, now=T0, timeout=60)
    assert isinstance(out, Failed)


def test_failed_carries_the_providers_reason() -> None:
    out = judge_operation(
        op(OperationState.FAILED, error="boot_failed: image pull"),
        started_at=T0,
        now=T0,
        timeout=60,
    )
    assert isinstance(out, Failed) and "boot_failed: image pull" in out.reason


def test_in_progress_waits_until_the_timeout() -> None:
    waiting = judge_operation(
        op(OperationState.PROVISIONING), started_at=T0, now=T0 + timedelta(seconds=30), timeout=60
    )
    assert isinstance(waiting, Waiting) and waiting.retry_after > 0
    late = judge_operation(
        op(OperationState.PENDING), started_at=T0, now=T0 + timedelta(seconds=61), timeout=60
    )
    assert isinstance(late, Failed) and "still pending after 60s" in late.reason


def test_capacity() -> None:
    assert isinstance(check_capacity(FixedCapacity(2), "pool-a"), Done)
    assert isinstance(check_capacity(FixedCapacity(None), "pool-a"), Done)
    held = check_capacity(FixedCapacity(0), "pool-a")
    assert isinstance(held, Held) and "no spare capacity" in held.reason
