"""Budgets and the storm breaker count an NVLink domain as one unit (issue 29)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from remediator.errors import PolicyError
from remediator.policy.budget import BreakerState, ClusterState, HoldCause, admit
from remediator.policy.evaluate import Decision
from remediator.policy.loader import load_policy_dir
from remediator.policy.schema import GlobalSettings
from tests.unit.policy.builders import T0, decision

RACKS = 5
TRAYS = [f"nvl-r{r}-t{t:02d}" for r in range(RACKS) for t in range(18)]
DOMAINS = {node: f"rack{node[5]}-uuid" for node in TRAYS}


def nvl72(**extra: object) -> ClusterState:
    data: dict[str, object] = {"nodes_per_pool": {"nvl": len(TRAYS)}, "domains": DOMAINS}
    data.update(extra)
    return ClusterState(**data)  # type: ignore[arg-type]


def settings(**data: object) -> GlobalSettings:
    return GlobalSettings.model_validate(data)


def test_eighteen_trays_of_one_rack_down_together_are_one_fault_not_a_storm() -> None:
    rack0 = [decision(t, "nvl") for t in TRAYS[:18]]
    # Unfolded (policy/scope.py folds them into one): each still takes a concurrency slot.
    result = admit(rack0, nvl72(), settings(max_concurrent=18), BreakerState(), T0)
    assert not result.breaker.tripped
    assert [unit for unit, _at in result.breaker.faults] == ["domain:rack0-uuid"]
    # One domain out: every tray of it joins the same unit of the budgets.
    assert len(result.admitted) == 18 and result.held == ()


def test_without_domains_the_same_eighteen_nodes_trip_the_breaker() -> None:
    rack0 = [decision(t, "nvl") for t in TRAYS[:18]]
    flat = ClusterState(nodes_per_pool={"nvl": len(TRAYS)})
    result = admit(rack0, flat, GlobalSettings(), BreakerState(), T0)
    assert result.breaker.tripped


def test_trays_across_many_domains_at_once_still_trip_the_breaker() -> None:
    one_per_rack = [decision(f"nvl-r{r}-t03", "nvl") for r in range(RACKS)]
    result = admit(one_per_rack, nvl72(), GlobalSettings(), BreakerState(), T0)
    assert result.breaker.tripped
    assert {h.cause for h in result.held} == {HoldCause.BREAKER}
    reason = result.breaker.reason or ""
    assert reason.startswith("5 of 5 nodes and NVLink domains newly faulted")


def test_at_most_max_domains_out_per_pool() -> None:
    config = settings(storm_breaker={"enabled": False})
    two_racks = [rack_decision("nvl-r0-t01"), rack_decision("nvl-r1-t01")]
    result = admit(two_racks, nvl72(domain_policies={"rack"}), config, BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["nvl-r0-t01"]
    assert [h.reason for h in result.held] == ["max domains out in pool nvl (1)"]


def test_a_domain_already_out_takes_more_of_its_trays_but_no_second_domain() -> None:
    config = settings(storm_breaker={"enabled": False}, max_domains_out=1)
    out = nvl72(
        unhealthy={"nvl": frozenset(TRAYS[:18]) | {"nvl-r2-t00"}},
        domains_out={"nvl": frozenset({"rack0-uuid"})},
        domain_policies=frozenset({"rack"}),
    )
    result = admit(
        [decision("nvl-r0-t05", "nvl"), rack_decision("nvl-r2-t00")],
        out,
        config,
        BreakerState(),
        T0,
    )
    assert [d.node for d in result.admitted] == ["nvl-r0-t05"]
    assert [h.reason for h in result.held] == ["max domains out in pool nvl (1)"]
    roomier = settings(storm_breaker={"enabled": False}, max_domains_out=2)
    again = admit([rack_decision("nvl-r2-t00")], out, roomier, BreakerState(), T0)
    assert [d.node for d in again.admitted] == ["nvl-r2-t00"]


def test_nodes_without_a_domain_are_counted_per_node_as_before() -> None:
    config = settings(storm_breaker={"enabled": False})
    cluster = ClusterState(nodes_per_pool={"train": 20}, domains=DOMAINS)
    result = admit([decision(n) for n in "abc"], cluster, config, BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["a", "b"]
    assert [h.reason for h in result.held] == ["max unhealthy in pool train (2)"]


def test_policy_validate_checks_max_domains_out(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "policies:\n  - name: x\n    description: d\n    why: w\n"
        "    match: {kind: xid, codes: [79]}\n    actions: [{action: replace}]\n"
    )
    (tmp_path / "settings.yaml").write_text("max_concurrent: 3\nmax_domains_out: -1\n")
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    assert "settings.yaml:2: max_domains_out" in str(caught.value)


def test_a_tray_decision_takes_out_its_tray_not_its_domain() -> None:
    """Issue 39 item 2: tray decisions in two racks are both admitted; a domain-scope decision
    is what takes its domain out, and a second one waits."""
    config = settings(storm_breaker={"enabled": False})
    cluster = nvl72(domain_policies=frozenset({"rack"}))
    trays = [decision("nvl-r0-t01", "nvl"), decision("nvl-r1-t01", "nvl")]
    result = admit(trays, cluster, config, BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["nvl-r0-t01", "nvl-r1-t01"]
    racks = [rack_decision("nvl-r2-t00"), rack_decision("nvl-r3-t00")]
    result = admit(racks, cluster, config, BreakerState(), T0)
    assert [d.node for d in result.admitted] == ["nvl-r2-t00"]
    assert [h.reason for h in result.held] == ["max domains out in pool nvl (1)"]


def test_a_domain_past_its_own_tray_budget_is_out() -> None:
    """Two fenced trays of 18 are within the default per_domain budget (2); a third takes the
    domain out, and then no other domain may go out."""
    config = settings(storm_breaker={"enabled": False}, max_unhealthy={"per_pool": {"count": 9}})
    fenced = {"nvl": {"rack0-uuid": frozenset({"nvl-r0-t01", "nvl-r0-t02"})}}
    cluster = nvl72(fenced_trays=fenced, domain_policies=frozenset({"rack"}))
    result = admit(
        [decision("nvl-r0-t03", "nvl"), rack_decision("nvl-r1-t00")],
        cluster,
        config,
        BreakerState(),
        T0,
    )
    assert [d.node for d in result.admitted] == ["nvl-r0-t03"]
    assert [h.reason for h in result.held] == ["max domains out in pool nvl (1)"]
    roomier = settings(
        storm_breaker={"enabled": False},
        max_unhealthy={"per_pool": {"count": 9}, "per_domain": {"count": 3}},
    )
    again = admit(
        [decision("nvl-r0-t03", "nvl"), rack_decision("nvl-r1-t00")],
        cluster,
        roomier,
        BreakerState(),
        T0,
    )
    assert [d.node for d in again.admitted] == ["nvl-r0-t03", "nvl-r1-t00"]


def rack_decision(node: str) -> Decision:
    return dataclasses.replace(decision(node, "nvl"), policy="rack", scope="domain")
