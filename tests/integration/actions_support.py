"""Helpers shared by the action integration tests: drive a step until it settles."""

from __future__ import annotations

import time
from collections.abc import Callable

from remediator.actions.outcome import Outcome, Waiting


def until_settled(step: Callable[[], Outcome], timeout: float = 60.0) -> Outcome:
    """Call an action until it stops Waiting, sleeping as it asks (capped, to keep tests quick)."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = step()
        if not isinstance(outcome, Waiting):
            return outcome
        assert time.monotonic() < deadline, f"still waiting: {outcome.reason}"
        time.sleep(min(outcome.retry_after, 0.5))


def wait_for(
    predicate: Callable[[], bool], timeout: float = 120.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
