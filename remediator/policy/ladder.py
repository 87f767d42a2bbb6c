"""A policy's ladder as stored on a remediation: its steps in seconds, with the fallbacks that
`on_failure` resolves to trailing it. Stored when the remediation opens, so a policy edit never
changes a running remediation; the planner walks it, the scenario runner and backtest build it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from remediator.policy.schema import Checkpoint, Rma, Step, Validate


@dataclass(frozen=True)
class LadderStep:
    """One rung of a policy's ladder as stored on the remediation (seconds, not durations)."""

    action: str
    grace_seconds: float | None = None
    min_grace_seconds: float | None = None
    timeout_seconds: float | None = None
    on_timeout: str | None = None
    message: str | None = None
    level: int | None = None  # diagnose: the DCGM run level
    limit: int | None = None  # reboot: at most this many reboots of the node within the window
    window_seconds: float | None = None
    fallback: bool | None = None  # only taken when a repair fails (`on_failure`)
    stage: int | None = None  # which fallback in a chain (a fallback without one is the first)
    ladder: str | None = None  # the policy a named fallback's steps come from
    via: str | None = None  # reboot: "maintenance" triggers the cloud's announced event
    checks: Mapping[str, Any] | None = None  # validate: the checks' settings (actions/burnin.py)
    target: str | None = None  # rma: "gpu" or "machine"

    def to_json(self) -> dict[str, Any]:
        return {
            k: dict(v) if isinstance(v, Mapping) else v
            for k, v in self.__dict__.items()
            if v is not None
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LadderStep:
        return cls(
            action=str(raw["action"]),
            grace_seconds=_float(raw.get("grace_seconds")),
            min_grace_seconds=_float(raw.get("min_grace_seconds")),
            timeout_seconds=_float(raw.get("timeout_seconds")),
            on_timeout=raw.get("on_timeout"),
            message=raw.get("message"),
            level=_int(raw.get("level")),
            limit=_int(raw.get("limit")),
            window_seconds=_float(raw.get("window_seconds")),
            fallback=bool(raw["fallback"]) if raw.get("fallback") is not None else None,
            stage=_int(raw.get("stage")),
            ladder=raw.get("ladder"),
            via=raw.get("via"),
            checks=dict(raw["checks"]) if raw.get("checks") is not None else None,
            target=raw.get("target"),
        )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _rung(step: Step) -> LadderStep:
    # A checkpoint step's grace is its max_grace (the drain's stays `grace`).
    grace = getattr(step, "max_grace", None) or getattr(step, "grace", None)
    floor = step.floor if isinstance(step, Checkpoint) else None
    timeout = getattr(step, "timeout", None)
    window = getattr(step, "window", None)
    return LadderStep(
        action=step.action,
        grace_seconds=grace.total_seconds() if grace is not None else None,
        min_grace_seconds=floor.total_seconds() if floor is not None else None,
        timeout_seconds=timeout.total_seconds() if timeout is not None else None,
        on_timeout=getattr(step, "on_timeout", None),
        message=step.reason if isinstance(step, Rma) else getattr(step, "message", None),
        level=getattr(step, "level", None),
        limit=getattr(step, "max_reboots", None),
        window_seconds=window.total_seconds() if window is not None else None,
        via="maintenance" if getattr(step, "via", None) == "maintenance" else None,
        checks=step.checks() if isinstance(step, Validate) else None,
        target=step.target if isinstance(step, Rma) else None,
    )


def ladder_from_policy(
    actions: Sequence[Step],
    on_failure: str | None = None,
    fallbacks: Sequence[tuple[str, Sequence[Step]]] = (),
) -> tuple[LadderStep, ...]:
    """The ladder as stored on a remediation. Each fallback (`on_failure`, resolved into
    `fallbacks` when it names other policies) trails it as steps taken only when a repair fails:
    `replace` as one fallback replace step, a named ladder as its steps with their stage."""
    steps = [_rung(step) for step in actions]
    if not fallbacks and on_failure == "replace":
        fallbacks = (("replace", ()),)
    for index, (name, following) in enumerate(fallbacks, start=1):
        if name == "replace":
            stage = None if index == 1 else index
            steps.append(LadderStep("replace", fallback=True, stage=stage))
            continue
        for step in following:
            steps.append(replace(_rung(step), fallback=True, stage=index, ladder=name))
    return tuple(steps)


def parse_ladder(raw: Sequence[Mapping[str, Any]]) -> tuple[LadderStep, ...]:
    return tuple(LadderStep.from_json(item) for item in raw)


def with_startup_taint(
    ladder: Sequence[LadderStep], startup_taint: str | None
) -> list[dict[str, Any]]:
    """The ladder as stored, each validate step told the settings' startup taint (a passed
    validation removes it): fixed when the remediation opens, like the rest of its ladder."""
    return [
        step.to_json()
        if step.checks is None or startup_taint is None
        else replace(step, checks={**step.checks, "startup_taint": startup_taint}).to_json()
        for step in ladder
    ]
