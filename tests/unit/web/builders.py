"""Store records built in memory, for the pure parts of the console and the commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.model.states import State
from remediator.signals.model import Signal, SignalKind
from remediator.store.records import EventRecord, RemediationRecord

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def event(
    eid: int,
    seconds: float,
    from_state: State | None,
    to_state: State | None,
    action: str | None = None,
    detail: dict[str, Any] | None = None,
) -> EventRecord:
    return EventRecord(
        id=eid,
        remediation_id=1,
        at=T0 + timedelta(seconds=seconds),
        from_state=from_state,
        to_state=to_state,
        action=action or (to_state.value if to_state else "note"),
        detail=detail or {},
        actor="controller-0",
    )


def path(*states: State, step: float = 60.0) -> tuple[EventRecord, ...]:
    """Transitions DETECTED → states[0] → …, one every `step` seconds from T0."""
    events = [event(1, 0, None, State.DETECTED)]
    previous = State.DETECTED
    for i, state in enumerate(states, start=1):
        events.append(event(i + 1, i * step, previous, state))
        previous = state
    return tuple(events)


def record(
    state: State,
    events: Sequence[EventRecord] = (),
    *,
    kind: SignalKind = SignalKind.XID,
    code: int | None = 79,
    created_at: datetime = T0,
    finished_at: datetime | None = None,
    **changes: Any,
) -> RemediationRecord:
    signal = Signal(node="gpu-node-1", kind=kind, source="dcgm", observed_at=T0, code=code)
    values: dict[str, Any] = {
        "id": 1,
        "cluster": "c",
        "node": "gpu-node-1",
        "pool": "pool-a",
        "policy": "xid-79-fallen-off-bus",
        "policy_priority": 100,
        "policy_commit": None,
        "policy_hash": None,
        "state": state,
        "dry_run": False,
        "approval_required": False,
        "reason": "test",
        "signal_kind": kind.value,
        "xid_code": code if kind is SignalKind.XID else None,
        "signals": (signal,),
        "ladder": ({"action": "cordon"},),
        "step_index": 0,
        "idempotency_key": "k",
        "replacement_operation_id": None,
        "new_node": None,
        "hold_reason": None,
        "error": None,
        "attempts": 0,
        "next_attempt_at": None,
        "version": 3,
        "created_at": created_at,
        "updated_at": created_at,
        "finished_at": finished_at,
        "events": tuple(events),
    }
    values.update(changes)
    return RemediationRecord(**values)
