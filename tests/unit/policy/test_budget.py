from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from remediator.policy.budget import (
    BreakerState,
    ClusterState,
    HoldCause,
    admit,
    breaker_limit,
    limit_for,
)
from remediator.policy.schema import GlobalSettings, Limit
from tests.unit.policy.builders import T0, decision


def settings(**data: object) -> GlobalSettings:
    return GlobalSettings.model_validate(data)


SHIPPED = Path(__file__).resolve().parents[3] / "policies" / "settings.yaml"


def load_shipped_settings() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    return data


ROOMY = {"max_unhealthy": {"per_pool": {"percent": 100}, "cluster": {"percent": 100}}}


def test_limit_takes_the_stricter_bound_and_never_rounds_a_pool_to_zero() -> None:
    assert limit_for(Limit(percent=10), 5) == 1
    assert limit_for(Limit(percent=10), 100) == 10
    assert limit_for(Limit(percent=10, count=3), 100) == 3
    assert limit_for(Limit(count=0), 100) == 0
    assert limit_for(Limit(percent=50), 0) == 0
    assert limit_for(Limit(), 10) is None


def test_pool_percent_holds_beyond_the_limit_in_priority_then_name_order() -> None:
    cluster = ClusterState(nodes_per_pool={"train": 20})
    result = admit(
        [decision("c"), decision("a"), decision("b", priority=90)],
        cluster,
        settings(storm_breaker={"enabled": False}),
        BreakerState(),
        T0,
    )
    assert [d.node for d in result.admitted] == ["b", "a"]
    assert [(h.decision.node, h.reason) for h in result.held] == [
        ("c", "max unhealthy in pool train (2)")
    ]


def test_already_unhealthy_nodes_use_the_budget_but_not_twice() -> None:
    cluster = ClusterState(nodes_per_pool={"train": 10}, unhealthy={"train": frozenset({"x"})})
    one = settings(max_unhealthy={"per_pool": {"percent": 10}, "cluster": {"percent": 100}})
    held = admit([decision("y")], cluster, one, BreakerState(), T0)
    assert held.admitted == ()
    again = admit([decision("x")], cluster, one, BreakerState(), T0)
    assert [d.node for d in again.admitted] == ["x"]


def test_cluster_wide_limit() -> None:
    cluster = ClusterState(nodes_per_pool={"a": 10, "b": 10})
    config = settings(max_unhealthy={"per_pool": {"percent": 100}, "cluster": {"count": 1}})
    result = admit([decision("n1", "a"), decision("n2", "b")], cluster, config, BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["n1"]
    assert result.held[0].reason == "max unhealthy in cluster (1)"


def test_max_concurrent_counts_open_remediations() -> None:
    cluster = ClusterState(nodes_per_pool={"train": 100}, open_remediations=4)
    result = admit([decision("a"), decision("b")], cluster, settings(**ROOMY), BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["a"]
    assert result.held[0].reason == "max concurrent remediations (5)"


def test_notify_only_decisions_need_no_budget() -> None:
    cluster = ClusterState(nodes_per_pool={"train": 1}, open_remediations=99)
    result = admit([decision("a", disruptive=False)], cluster, settings(), BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["a"]
    assert result.breaker.faults == ()


def test_storm_breaker_trips_and_stays_tripped() -> None:
    config = settings(
        **ROOMY, max_concurrent=100, storm_breaker={"max_new_faults": 4, "window": "5m"}
    )
    cluster = ClusterState(nodes_per_pool={"train": 100})
    first = admit(
        [decision("a"), decision("b"), decision("c")], cluster, config, BreakerState(), T0
    )
    assert len(first.admitted) == 3
    assert not first.breaker.tripped
    # The same nodes again (still faulty) are not new faults.
    same = admit([decision("a")], cluster, config, first.breaker, T0 + timedelta(minutes=1))
    assert not same.breaker.tripped
    tripped = admit([decision("d")], cluster, config, same.breaker, T0 + timedelta(minutes=2))
    assert tripped.breaker.tripped
    assert tripped.admitted == ()
    assert tripped.held[0].reason.startswith(
        "storm breaker tripped: 4 of 100 nodes newly faulted within 5m (limit 4)"
    )
    later = admit(
        [decision("e", disruptive=False)], cluster, config, tripped.breaker, T0 + timedelta(days=1)
    )
    assert later.breaker.tripped and later.admitted == ()
    reset = admit([decision("e")], cluster, config, BreakerState(), T0 + timedelta(days=1))
    assert [d.node for d in reset.admitted] == ["e"]


def test_breaker_window_forgets_old_faults() -> None:
    config = settings(
        **ROOMY, max_concurrent=100, storm_breaker={"max_new_faults": 2, "window": "5m"}
    )
    cluster = ClusterState(nodes_per_pool={"train": 100})
    first = admit([decision("a")], cluster, config, BreakerState(), T0)
    second = admit([decision("b")], cluster, config, first.breaker, T0 + timedelta(minutes=6))
    assert not second.breaker.tripped
    assert [node for node, _ in second.breaker.faults] == ["b"]


def test_disabled_breaker_never_trips() -> None:
    config = settings(
        **ROOMY, max_concurrent=100, storm_breaker={"enabled": False, "max_new_faults": 1}
    )
    cluster = ClusterState(nodes_per_pool={"train": 100})
    result = admit([decision(f"n{i}") for i in range(10)], cluster, config, BreakerState(), T0)
    assert len(result.admitted) == 10 and not result.breaker.tripped


def test_percent_budgets_take_a_floor_so_small_clusters_get_two_at_once() -> None:
    """Problem 9: 10% of a 16-node cluster rounded down to one node at a time."""
    assert limit_for(Limit(percent=10, min=2), 16) == 2
    assert limit_for(Limit(percent=10, min=2), 40) == 4
    assert limit_for(Limit(percent=10, min=2, count=3), 400) == 3
    shipped = settings(**load_shipped_settings())
    cluster = ClusterState(nodes_per_pool={"train": 16})
    result = admit([decision("a"), decision("b")], cluster, shipped, BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["a", "b"]
    busy = ClusterState(nodes_per_pool={"train": 16}, unhealthy={"train": frozenset({"a", "b"})})
    held = admit([decision("c")], busy, shipped, BreakerState(), T0)
    assert [h.reason for h in held.held] == ["max unhealthy in pool train (2)"]


def test_a_floor_needs_a_percent() -> None:
    with pytest.raises(ValidationError, match="min is the floor of percent"):
        Limit(min=2)


def test_shipped_breaker_trips_on_half_of_a_40_node_cluster() -> None:
    """Problem 10: 20 of 40 nodes never tripped it (20 is not "more than 20")."""
    shipped = settings(**load_shipped_settings())
    roomy = shipped.model_copy(update={"max_concurrent": 100})
    cluster = ClusterState(nodes_per_pool={"train": 40})
    storm = [decision(f"n{i:02d}") for i in range(20)]
    result = admit(storm, cluster, roomy, BreakerState(), T0)
    assert result.breaker.tripped and result.admitted == ()
    assert {h.cause for h in result.held} == {HoldCause.BREAKER}
    # A count alone trips when it is reached, not one later.
    exact = settings(**ROOMY, max_concurrent=100, storm_breaker={"max_new_faults": 20})
    many = ClusterState(nodes_per_pool={"train": 10_000})
    assert admit(storm, many, exact, BreakerState(), T0).breaker.tripped
    assert not admit(storm[:19], many, exact, BreakerState(), T0).breaker.tripped


def test_breaker_percent_means_the_same_on_small_and_large_fleets() -> None:
    config = settings(**ROOMY, max_concurrent=10_000)
    assert breaker_limit(config, 16) == 3  # the floor
    assert breaker_limit(config, 40) == 4
    assert breaker_limit(config, 16_000) == 20  # the count is stricter


def test_breaker_counts_distinct_known_nodes_only() -> None:
    config = settings(**ROOMY, max_concurrent=100, storm_breaker={"max_new_faults": 3})
    cluster = ClusterState(nodes_per_pool={"train": 100}, known=frozenset({"a", "b"}))
    ghosts = [decision("a"), decision("b"), decision("old-host-1"), decision("old-host-2")]
    result = admit(ghosts, cluster, config, BreakerState(), T0)
    assert not result.breaker.tripped
    assert [node for node, _ in result.breaker.faults] == ["a", "b"]


def test_queued_decisions_are_not_counted_again() -> None:
    """Problem 10: held decisions came back together and counted as new faults, re-tripping."""
    config = settings(**ROOMY, max_concurrent=100, storm_breaker={"max_new_faults": 3})
    cluster = ClusterState(nodes_per_pool={"train": 100})
    queued = [decision(f"q{i}") for i in range(10)]
    result = admit(
        queued, cluster, config, BreakerState(), T0, counted=frozenset(d.node for d in queued)
    )
    assert not result.breaker.tripped and len(result.admitted) == 10
    assert result.breaker.faults == ()


def test_budget_holds_carry_their_cause() -> None:
    cluster = ClusterState(nodes_per_pool={"train": 100}, open_remediations=5)
    result = admit([decision("a")], cluster, settings(**ROOMY), BreakerState(), T0)
    assert result.held[0].cause is HoldCause.BUDGET
