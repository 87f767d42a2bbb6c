"""New-machine validations (#26): a node that joined with the startup taint and no remediation
(a scale-up, a manual add) is validated before it takes work. That is no fault, so, as planned
work (policy/planned.py), it never reaches the storm or fleet breaker nor the fault budgets;
`new_machines` in settings.yaml bounds how many validate at once instead."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from remediator.policy.budget import limit_for
from remediator.policy.schema import Limit
from remediator.signals.model import Signal, SignalKind


class NewMachine(Protocol):
    @property
    def node(self) -> str: ...


N = TypeVar("N", bound=NewMachine)


def is_new_machine(signals: Iterable[Signal] | None) -> bool:
    """A decision (or remediation) about nothing but the startup taint: a validation, no fault."""
    kinds = {signal.kind for signal in signals or ()}
    return kinds == {SignalKind.UNVALIDATED}


def admit_new_machines(
    candidates: Sequence[N], limit: Limit, running: int, *, fleet: int
) -> tuple[list[N], list[tuple[N, str]]]:
    """In node order, up to the limit (of `fleet` nodes) less the validations `running`."""
    cap = limit_for(limit, fleet)
    admitted: list[N] = []
    held: list[tuple[N, str]] = []
    for candidate in sorted(candidates, key=lambda c: c.node):
        if cap is not None and running + 1 > cap:
            held.append((candidate, f"new-machine max_concurrent ({cap})"))
            continue
        running += 1
        admitted.append(candidate)
    return admitted, held
