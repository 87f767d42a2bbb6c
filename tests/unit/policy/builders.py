"""Small builders so each test states only what matters to it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.policy.evaluate import Decision
from remediator.policy.schema import GlobalSettings, Policy
from remediator.signals.model import Signal, SignalKind

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REPLACE = [{"action": "cordon"}, {"action": "drain"}, {"action": "replace"}]


def policy(name: str, match: dict[str, Any], **extra: Any) -> Policy:
    data: dict[str, Any] = {
        "name": name,
        "description": f"{name} for tests",
        "why": "tests need it",
        "match": match,
        "actions": REPLACE,
    }
    data.update(extra)
    return Policy.model_validate(data)


def signal(
    node: str,
    kind: SignalKind | str,
    at: float = 0.0,
    *,
    gpu: int | None = None,
    code: int | None = None,
    value: float | None = None,
    labels: dict[str, str] | None = None,
) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind(kind),
        source="test",
        observed_at=T0 + timedelta(seconds=at),
        gpu=gpu,
        code=code,
        value=value,
        labels=labels or {},
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


SETTINGS = GlobalSettings()


def decision(
    node: str, pool: str = "train", priority: int = 50, disruptive: bool = True
) -> Decision:
    return Decision(
        node=node,
        pool=pool,
        policy="p",
        priority=priority,
        signals=(),
        actions=(),
        approval="auto",
        dry_run=False,
        disruptive=disruptive,
        reason="test",
        decided_at=T0,
    )
