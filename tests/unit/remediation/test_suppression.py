"""A human's cancel sticks (issue 9, problem 11): which decisions a cancel still covers."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.model.states import State
from remediator.remediation.suppression import suppressed_by
from remediator.signals.model import Signal, SignalKind
from remediator.store.records import RemediationRecord

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def signal(kind: SignalKind, gpu: int | None, code: int | None = None) -> Signal:
    return Signal(node="n1", kind=kind, source="push", observed_at=NOW, gpu=gpu, code=code)


def cancelled(*signals: Signal, until: datetime | None = NOW + timedelta(hours=1)) -> Any:
    fields: dict[str, Any] = dict.fromkeys(RemediationRecord.__dataclass_fields__)
    fields.update(id=7, node="n1", state=State.CANCELLED, signals=signals, suppressed_until=until)
    return RemediationRecord(**fields)


XID79 = signal(SignalKind.XID, 0, 79)


def test_an_echo_of_the_same_gpu_is_covered_by_another_policy_too() -> None:
    cancel = cancelled(XID79)
    assert suppressed_by("n1", [signal(SignalKind.GPU_MISSING, 0)], [cancel], NOW) is cancel
    # A node-wide signal cannot be told apart from the cancelled fault.
    assert suppressed_by("n1", [signal(SignalKind.NODE_CONDITION, None)], [cancel], NOW) is cancel


def test_a_distinct_fault_another_node_or_an_expired_cooldown_is_not() -> None:
    cancel = cancelled(XID79)
    assert suppressed_by("n1", [signal(SignalKind.GPU_MISSING, 3)], [cancel], NOW) is None
    assert suppressed_by("n2", [signal(SignalKind.GPU_MISSING, 0)], [cancel], NOW) is None
    later = NOW + timedelta(hours=2)
    assert suppressed_by("n1", [signal(SignalKind.GPU_MISSING, 0)], [cancel], later) is None
    zero = replace(cancel, suppressed_until=NOW)
    assert suppressed_by("n1", [XID79], [zero], NOW) is None


def test_a_node_wide_cancel_covers_every_gpu() -> None:
    cancel = cancelled(signal(SignalKind.NODE_CONDITION, None))
    assert suppressed_by("n1", [signal(SignalKind.XID, 5, 48)], [cancel], NOW) is cancel
