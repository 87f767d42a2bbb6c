"""How a provider operation and a capacity answer become outcomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from remediator.actions.outcome import Done, Failed, Held, Waiting
from remediator.actions.replace import (
    PAUSE_POLL_SECONDS,
    check_capacity,
    judge_operation,
    replace_node,
)
from remediator.model.states import State
from remediator.providers.base import Operation, OperationState, ReplacementPaused
from remediator.remediation.steps.replace import asked_since
from remediator.store.records import EventRecord
from tests.unit.web.builders import record

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


class PausedPool(FixedCapacity):
    """A platform whose controllers are paused until `resume()`: then it grants the request."""

    def __init__(self) -> None:
        super().__init__(None)
        self.paused = True

    def request_replacement(self, pool: str, node: str, key: str, reason: str) -> Operation:
        if self.paused:
            raise ReplacementPaused("Cluster default/sim is paused (spec.paused)")
        return op(OperationState.PROVISIONING)


def test_a_paused_platform_waits_holding_and_goes_ahead_once_resumed() -> None:
    pool = PausedPool()

    def ask() -> object:
        return replace_node(
            pool, pool="pool-a", node="gpu-1", idempotency_key="k", reason="r",
            started_at=T0, now=T0,
        )  # fmt: skip

    paused = ask()
    assert isinstance(paused, Waiting) and paused.facts["holding"] is True
    assert paused.retry_after == PAUSE_POLL_SECONDS and "paused" in paused.reason
    pool.paused = False
    going = ask()
    assert isinstance(going, Waiting) and "holding" not in going.facts
    assert going.facts["operation_id"] == "op-1"


def line(eid: int, minutes: float, action: str, holding: bool = False) -> EventRecord:
    detail = {"holding": True} if holding else {}
    return EventRecord(eid, 1, T0 + timedelta(minutes=minutes), None, None, action, detail, "c")


def test_a_long_pause_does_not_count_against_the_replacement_timeout() -> None:
    entered = EventRecord(1, 1, T0, State.DRAINING, State.REPLACING, "drain_done", {}, "c")
    now = T0 + timedelta(hours=2)
    held = record(State.REPLACING, (entered, line(2, 0.1, "progress", holding=True)))
    # The pause just ended: the request goes out now, not two hours ago.
    assert asked_since(held, T0, now) == now
    provisioning = op(OperationState.PROVISIONING)
    waiting = judge_operation(
        provisioning, started_at=asked_since(held, T0, now), now=now, timeout=900
    )
    assert isinstance(waiting, Waiting)
    asked = record(State.REPLACING, (*held.events, line(3, 119, "progress")))
    assert asked_since(asked, T0, now) == T0 + timedelta(minutes=119)
    assert asked_since(record(State.REPLACING, (entered,)), T0, now) == T0
