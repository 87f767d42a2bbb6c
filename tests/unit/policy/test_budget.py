from __future__ import annotations

from datetime import timedelta

from remediator.policy.budget import BreakerState, ClusterState, admit, limit_for
from remediator.policy.schema import GlobalSettings, Limit
from tests.unit.policy.builders import T0, decision


def settings(**data: object) -> GlobalSettings:
    return GlobalSettings.model_validate(data)


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
        settings(),
        BreakerState(),
        T0,
    )
    assert [d.node for d in result.admitted] == ["b", "a"]
    assert [(h.decision.node, h.reason) for h in result.held] == [
        ("c", "max unhealthy in pool train (2)")
    ]


def test_already_unhealthy_nodes_use_the_budget_but_not_twice() -> None:
    cluster = ClusterState(nodes_per_pool={"train": 10}, unhealthy={"train": frozenset({"x"})})
    held = admit([decision("y")], cluster, settings(), BreakerState(), T0)
    assert held.admitted == ()
    again = admit([decision("x")], cluster, settings(), BreakerState(), T0)
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
        **ROOMY, max_concurrent=100, storm_breaker={"max_new_faults": 3, "window": "5m"}
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
        "storm breaker tripped: 4 nodes newly faulted within 5m"
    )
    later = admit(
        [decision("e", disruptive=False)], cluster, config, tripped.breaker, T0 + timedelta(days=1)
    )
    assert later.breaker.tripped and later.admitted == ()
    reset = admit([decision("e")], cluster, config, BreakerState(), T0 + timedelta(days=1))
    assert [d.node for d in reset.admitted] == ["e"]


def test_breaker_window_forgets_old_faults() -> None:
    config = settings(
        **ROOMY, max_concurrent=100, storm_breaker={"max_new_faults": 1, "window": "5m"}
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
