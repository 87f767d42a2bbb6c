"""The heartbeat budget: the period asked of a fleet and the silence bound that follows it."""

from __future__ import annotations

from remediator.model.heartbeats import MAX_ASKED_SECONDS, asked_period, silent_after
from remediator.settings import AgentIntakeSettings


def test_the_period_asked_keeps_the_fleet_within_its_budget() -> None:
    assert asked_period(0, 40.0) == 0.0
    assert asked_period(400, 40.0) == 10.0
    assert asked_period(10_000, 40.0) == 250.0
    assert asked_period(10_000, None) == 0.0
    assert asked_period(10**9, 1.0) == MAX_ASKED_SECONDS
    # The default: 10,000 agents every 1,000 s, ~1 % of a core of heartbeats (docs/scale.md).
    assert asked_period(10_000, AgentIntakeSettings().heartbeat_budget_per_second) == 1000.0


def test_silence_is_three_missed_beats_never_sooner_than_configured() -> None:
    assert silent_after(60.0, 0.0) == 60.0
    assert silent_after(60.0, 10.0) == 60.0
    assert silent_after(60.0, 250.0) == 750.0
