"""The breaker's figure: distinct nodes newly faulted against every node present during the
window (issue 22 item 14: "32 of 16 nodes newly faulted" once replacements had joined)."""

from __future__ import annotations

from datetime import timedelta

from remediator.policy.budget import BreakerState, ClusterState, admit
from remediator.policy.schema import GlobalSettings
from tests.unit.policy.builders import T0, decision

CONFIG = GlobalSettings.model_validate(
    {
        "max_concurrent": 100,
        "max_unhealthy": {"per_pool": {"count": 100}, "cluster": {"count": 100}},
        "storm_breaker": {"max_new_faults": 6, "window": "30m"},
    }
)


def test_faulted_nodes_that_left_count_in_the_base_too() -> None:
    # Four nodes faulted and were replaced (they are gone, their replacements have joined); now
    # two of today's four nodes fault as well.
    earlier = tuple((f"old-{i}", T0 - timedelta(minutes=5)) for i in range(4))
    today = frozenset({"new-0", "new-1", "new-2", "new-3"})
    cluster = ClusterState(nodes_per_pool={"train": 4}, known=today)
    result = admit(
        [decision("new-0"), decision("new-1")], cluster, CONFIG, BreakerState(faults=earlier), T0
    )
    assert result.breaker.tripped
    assert result.breaker.reason is not None
    assert result.breaker.reason.startswith("6 of 8 nodes newly faulted within 30m")


def test_the_figure_never_exceeds_the_base_without_an_inventory() -> None:
    earlier = tuple((f"n{i}", T0 - timedelta(minutes=1)) for i in range(5))
    cluster = ClusterState(nodes_per_pool={"train": 3})
    result = admit([decision("n9")], cluster, CONFIG, BreakerState(faults=earlier), T0)
    assert result.breaker.reason is not None
    assert result.breaker.reason.startswith("6 of 6 nodes")
