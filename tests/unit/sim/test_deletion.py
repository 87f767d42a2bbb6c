"""Which grace period a DELETE gets, when a pod goes at once, and how a second DELETE may only
shorten a deletion under way — the API server's rules as a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remediator.sim.kube.api.deletion import Action, Deletion, plan_deletion
from remediator.sim.kube.api.kobj import rfc3339
from remediator.sim.kube.api.store import Obj

NOW = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)


def pod(node: str | None = "n1", phase: str = "Running", grace: int | None = None) -> Obj:
    spec: Obj = {"nodeName": node} if node else {}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def at(seconds: int) -> str:
    return rfc3339(NOW + timedelta(seconds=seconds))


@pytest.mark.parametrize(
    ("target", "grace", "expected"),
    [
        (pod(), None, Deletion(Action.MARK, at(30), 30)),
        (pod(grace=120), None, Deletion(Action.MARK, at(120), 120)),
        (pod(grace=120), 10, Deletion(Action.MARK, at(10), 10)),
        (pod(), -5, Deletion(Action.MARK, at(1), 1)),
        (pod(), 0, Deletion(Action.REMOVE)),
        (pod(node=None, phase="Pending"), 30, Deletion(Action.REMOVE)),
        (pod(phase="Succeeded"), None, Deletion(Action.REMOVE)),
    ],
)
def test_first_delete(target: Obj, grace: int | None, expected: Deletion) -> None:
    assert plan_deletion(target, grace, NOW) == expected


def terminating(grace: int | None) -> Obj:
    """Deleted 20 s before NOW with `grace` seconds."""
    target = pod()
    target["metadata"]["deletionTimestamp"] = at(-20 + (grace or 0))
    if grace is not None:
        target["metadata"]["deletionGracePeriodSeconds"] = grace
    return target


@pytest.mark.parametrize(
    ("grace", "expected"),
    [
        (None, Deletion(Action.KEEP)),
        (60, Deletion(Action.KEEP)),
        (30, Deletion(Action.KEEP)),
        (25, Deletion(Action.MARK, at(5), 25)),  # counted from the first request, not from now
        (0, Deletion(Action.REMOVE)),
    ],
)
def test_a_second_delete_only_shortens(grace: int | None, expected: Deletion) -> None:
    assert plan_deletion(terminating(30), grace, NOW) == expected


def test_terminating_without_a_grace_period_goes_at_once() -> None:
    assert plan_deletion(terminating(None), 10, NOW) == Deletion(Action.REMOVE)
