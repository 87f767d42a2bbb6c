"""The planner of planned ladders: the job's checkpoint inside the pool's window, never later
than the deadline less the margin and the drain; a passed deadline is urgent. And the planned
budget, which is not the storm breaker's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from remediator.policy.planned import (
    ANN_CHECKPOINT_INTERVAL,
    ANN_NEXT_CHECKPOINT,
    admit_planned,
    announced_checkpoints,
    choose_moment,
    describe,
    drain_time,
)
from remediator.policy.schema import PlannedBudget, Policy, When
from remediator.policy.windows import Opening

NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)
H = timedelta(hours=1)
DEADLINE = NOW + 48 * H
WHEN = When(before_deadline=2 * H, at_checkpoint=True, window="pool")
DRAIN = timedelta(minutes=10)


def nights(count: int = 3) -> list[Opening]:
    """02:00 to 06:00 UTC on the nights after NOW."""
    first = datetime(2026, 3, 3, 2, tzinfo=UTC)
    return [
        Opening("nightly", first + i * 24 * H, first + i * 24 * H + 4 * H) for i in range(count)
    ]


def test_the_checkpoint_inside_the_window_is_chosen() -> None:
    checkpoints = [NOW + 30 * timedelta(minutes=1) * k for k in range(1, 200)]
    moment = choose_moment(
        now=NOW,
        deadline=DEADLINE,
        when=WHEN,
        drain=DRAIN,
        openings=nights(),
        checkpoints=checkpoints,
    )
    assert moment.at == datetime(2026, 3, 3, 2, tzinfo=UTC)
    assert moment.checkpoint == moment.at and not moment.urgent
    assert moment.opening is not None and moment.opening.window == "nightly"
    assert moment.reason == "the job's checkpoint inside window nightly"
    assert moment.latest == DEADLINE - 2 * H - DRAIN


def test_a_checkpoint_outside_every_window_is_passed_over() -> None:
    outside = [
        datetime(2026, 3, 2, 20, tzinfo=UTC),
        datetime(2026, 3, 3, 5, 55, tzinfo=UTC),
        datetime(2026, 3, 4, 3, tzinfo=UTC),
    ]
    moment = choose_moment(
        now=NOW,
        deadline=DEADLINE,
        when=WHEN,
        drain=DRAIN,
        openings=nights(),
        checkpoints=outside,
    )
    # 05:55 is inside the opening but its drain would run past 06:00.
    assert moment.at == datetime(2026, 3, 4, 3, tzinfo=UTC)


def test_without_a_checkpoint_in_time_the_window_opening_is_taken() -> None:
    moment = choose_moment(
        now=NOW, deadline=DEADLINE, when=WHEN, drain=DRAIN, openings=nights(), checkpoints=[]
    )
    assert moment.at == datetime(2026, 3, 3, 2, tzinfo=UTC) and moment.checkpoint is None
    assert moment.reason == "no checkpoint inside a window in time: window nightly opens"


def test_never_later_than_the_deadline_less_margin_and_drain() -> None:
    deadline = datetime(2026, 3, 3, 4, tzinfo=UTC)
    late_checkpoint = [datetime(2026, 3, 3, 1, 55, tzinfo=UTC)]
    moment = choose_moment(
        now=NOW,
        deadline=deadline,
        when=WHEN,
        drain=DRAIN,
        openings=nights(),
        checkpoints=late_checkpoint,
    )
    # The window opens at 02:00 but the latest start is 01:50: the window is too late.
    assert moment.latest == datetime(2026, 3, 3, 1, 50, tzinfo=UTC)
    assert moment.at == moment.latest
    assert moment.reason == "no window opens in time: the latest safe moment"


def test_a_passed_deadline_is_urgent_and_a_missed_latest_moment_is_now() -> None:
    urgent = choose_moment(
        now=NOW, deadline=NOW - H, when=WHEN, drain=DRAIN, openings=nights(), checkpoints=[]
    )
    assert urgent.urgent and urgent.at == NOW
    assert urgent.reason == "the deadline has passed"
    close = choose_moment(
        now=NOW, deadline=NOW + H, when=WHEN, drain=DRAIN, openings=nights(), checkpoints=[]
    )
    assert not close.urgent and close.at == NOW


def test_no_window_named_means_the_first_checkpoint() -> None:
    when = When(before_deadline=2 * H, at_checkpoint=True)
    moment = choose_moment(
        now=NOW,
        deadline=DEADLINE,
        when=when,
        drain=DRAIN,
        openings=None,
        checkpoints=[NOW - H, NOW + 20 * timedelta(minutes=1)],
    )
    assert moment.at == NOW + 20 * timedelta(minutes=1)
    assert moment.reason == "the job's checkpoint"
    plain = choose_moment(
        now=NOW, deadline=DEADLINE, when=When(), drain=DRAIN, openings=None, checkpoints=[]
    )
    assert plain.at == NOW and plain.reason == "now"
    assert "deadline 2026-03-04T12:00:00+00:00, 2d before it" in describe(plain)


def test_every_announcing_pod_has_checkpointed_at_the_moment() -> None:
    pods = [
        {ANN_NEXT_CHECKPOINT: "2026-03-02T12:20:00Z", ANN_CHECKPOINT_INTERVAL: "30m"},
        {ANN_NEXT_CHECKPOINT: "2026-03-02T11:35:00+00:00", ANN_CHECKPOINT_INTERVAL: "30m"},
        {"other": "pod without the handshake"},
        {ANN_NEXT_CHECKPOINT: "tomorrow"},
    ]
    times, problems = announced_checkpoints(pods, NOW, NOW + 2 * H)
    # The second pod's 11:35 series continues 12:05, 12:35, …; each moment waits for both.
    assert times[:3] == [
        datetime(2026, 3, 2, 12, 20, tzinfo=UTC),
        datetime(2026, 3, 2, 12, 50, tzinfo=UTC),
        datetime(2026, 3, 2, 13, 20, tzinfo=UTC),
    ]
    assert len(problems) == 1 and problems[0].startswith("'tomorrow': ")
    once, _ = announced_checkpoints([{ANN_NEXT_CHECKPOINT: "2026-03-02T13:00:00Z"}], NOW, NOW + H)
    assert once == [NOW + H]
    assert announced_checkpoints([], NOW, NOW + H) == ([], [])


def test_drain_time_is_the_ladders_grace_unless_given() -> None:
    base = {
        "name": "p",
        "description": "d",
        "why": "w",
        "match": {"kind": "maintenance"},
        "when": {"before_deadline": "1h"},
        "actions": [
            {"action": "cordon"},
            {"action": "checkpoint", "max_grace": "5m"},
            {"action": "drain"},
        ],
    }
    assert drain_time(Policy.model_validate(base)) == timedelta(minutes=5)
    given = {**base, "when": {"drain_time": "20m"}}
    assert drain_time(Policy.model_validate(given)) == timedelta(minutes=20)


@dataclass(frozen=True)
class PlannedCandidate:
    node: str
    pool: str | None


def test_the_planned_budget_is_its_own() -> None:
    candidates = [PlannedCandidate(f"n{i}", "gpu-a" if i < 3 else "gpu-b") for i in range(5)]
    admitted, held = admit_planned(
        candidates, PlannedBudget(max_concurrent=3, per_pool=2), {"gpu-b": 1}
    )
    assert [c.node for c in admitted] == ["n0", "n1"]
    assert {why for _, why in held} == {"planned max_concurrent (3)"}
    admitted, held = admit_planned(
        candidates, PlannedBudget(max_concurrent=10, per_pool=1), {"gpu-b": 1}
    )
    assert [c.node for c in admitted] == ["n0"]
    assert [(c.node, why) for c, why in held] == [
        ("n1", "planned per_pool in gpu-a (1)"),
        ("n2", "planned per_pool in gpu-a (1)"),
        ("n3", "planned per_pool in gpu-b (1)"),
        ("n4", "planned per_pool in gpu-b (1)"),
    ]
