"""The fleet breaker's pure decision: the shared window over every taking-part cluster's nodes,
the stricter of count and percent, distinct (cluster, node) pairs, nothing outside the window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from remediator.policy.fleet_breaker import FleetFaultSeen, fleet_verdict
from remediator.policy.schema import FleetBreaker, GlobalSettings, Limit

NOW = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
CONFIG = FleetBreaker(enabled=True)  # 5% of the fleet (at least 3) within 10 minutes
NODES = {"east": 100, "west": 100}  # 200 nodes: 5% is 10


def faults(cluster: str, count: int, ago: timedelta = timedelta(minutes=1)) -> list[FleetFaultSeen]:
    return [FleetFaultSeen(cluster, f"{cluster}-gpu-{i}", NOW - ago) for i in range(count)]


def test_it_is_off_by_default_and_five_percent_in_ten_minutes_when_on() -> None:
    shipped = GlobalSettings().fleet_breaker
    assert shipped.enabled is False
    assert shipped.max_new_faults == Limit(percent=5, min=3)
    assert shipped.window == timedelta(minutes=10)


def test_faults_spread_over_clusters_trip_it_where_none_alone_would() -> None:
    below = fleet_verdict(CONFIG, [*faults("east", 5), *faults("west", 4)], NODES, NOW)
    assert (below.trip, below.faults, below.base, below.limit) == (False, 9, 200, 10)
    over = fleet_verdict(CONFIG, [*faults("east", 5), *faults("west", 5)], NODES, NOW)
    assert over.trip
    assert over.reason == (
        "10 of 200 fleet nodes newly faulted within 10m (limit 10) in 2 clusters (east, west); "
        "a human must reset it"
    )


def test_only_faults_within_the_window_count() -> None:
    old = faults("east", 6, ago=timedelta(minutes=10))  # exactly the window: out
    verdict = fleet_verdict(CONFIG, [*old, *faults("west", 5)], NODES, NOW)
    assert (verdict.trip, verdict.faults) == (False, 5)


def test_the_same_node_twice_counts_once_and_the_same_name_in_two_clusters_twice() -> None:
    same = [FleetFaultSeen("east", "gpu-1", NOW), FleetFaultSeen("east", "gpu-1", NOW)]
    both = [*same, FleetFaultSeen("west", "gpu-1", NOW)]
    assert fleet_verdict(CONFIG, both, NODES, NOW).faults == 2


def test_the_stricter_of_count_and_percent_wins_and_min_floors_the_percent() -> None:
    strict = FleetBreaker(enabled=True, max_new_faults={"count": 4, "percent": 5})
    assert fleet_verdict(strict, faults("east", 4), NODES, NOW).trip
    small = fleet_verdict(CONFIG, faults("east", 2), {"east": 10}, NOW)  # 5% of 10 is 0: min 3
    assert (small.trip, small.limit) == (False, 3)


def test_a_cluster_without_a_node_count_still_counts_and_never_exceeds_the_whole() -> None:
    verdict = fleet_verdict(CONFIG, faults("new", 4), {}, NOW)
    assert (verdict.base, verdict.limit, verdict.trip) == (4, 3, True)
    assert verdict.reason is not None and "4 of 4 fleet nodes" in verdict.reason


@pytest.mark.parametrize(
    "bad",
    [
        {"max_new_faults": {"count": 0}},
        {"max_new_faults": {"min": 3}},
        {"window": "0s"},
        {"surprise": True},
    ],
)
def test_a_bad_setting_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FleetBreaker.model_validate(bad)
