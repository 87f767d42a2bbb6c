"""`scope: node|clique|domain`: the policy field, its validation, and decisions folded per unit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from remediator.errors import PolicyError
from remediator.model.topology import CLIQUE_LABEL, build_topology
from remediator.policy.evaluate import Decision, History, evaluate
from remediator.policy.loader import load_policy_dir
from remediator.policy.scenario import Scenario, run_scenario
from remediator.policy.scope import fold_scopes
from tests.unit.policy.builders import SETTINGS, T0, decision, policy, signal

UUID = "b7e1f3a2-0c4d-4e5f-8a9b-0123456789ab"
LABELS = {
    f"nvl-r0-t{t:02d}": {
        CLIQUE_LABEL: f"{UUID}.{t // 9}",
        "remediator.io/rack": "rack-0",
        "remediator.io/tray": str(t),
    }
    for t in range(18)
} | {"plain": {}}
TOPOLOGY = build_topology(LABELS)


def scoped(node: str, scope: str, at: float = 0.0) -> Decision:
    return dataclasses.replace(
        decision(node),
        scope=scope,
        signals=(signal(node, "xid", at, code=79),),  # type: ignore[arg-type]
    )


def test_eighteen_trays_signalling_fold_into_one_domain_decision() -> None:
    decisions = [scoped(f"nvl-r0-t{t:02d}", "domain", at=t) for t in reversed(range(18))]
    [folded] = fold_scopes(decisions, TOPOLOGY)
    assert folded.node == "nvl-r0-t00"
    assert folded.domain == UUID
    assert folded.members == tuple(f"nvl-r0-t{t:02d}" for t in range(18))
    assert [s.node for s in folded.signals] == [f"nvl-r0-t{t:02d}" for t in range(18)]
    assert folded.reason.endswith(f"scope domain {UUID}: 18 of its 18 trays signalled")


def test_clique_scope_covers_the_clique_only() -> None:
    [folded] = fold_scopes([scoped("nvl-r0-t10", "clique")], TOPOLOGY)
    assert folded.domain == f"{UUID}.1"
    assert folded.members == tuple(f"nvl-r0-t{t:02d}" for t in range(9, 18))
    assert folded.reason.endswith("signalled by nvl-r0-t10")


def test_node_scope_and_unplaced_nodes_stay_per_node() -> None:
    node = scoped("nvl-r0-t01", "node")
    plain = scoped("plain", "domain")
    out = fold_scopes([node, plain], TOPOLOGY)
    assert out[0] is node
    assert out[1].node == "plain" and out[1].members == ("plain",) and out[1].domain is None
    assert out[1].reason.endswith("scope domain: no clique label, per node")


def test_two_policies_on_one_domain_stay_two_decisions() -> None:
    a = scoped("nvl-r0-t01", "domain")
    b = dataclasses.replace(scoped("nvl-r0-t02", "domain"), policy="q")
    assert [d.policy for d in fold_scopes([a, b], TOPOLOGY)] == ["p", "q"]


def test_a_quorum_policy_acts_only_on_enough_trays_of_a_unit() -> None:
    """Issue 39 item 3: under its quorum a domain policy does not apply (the per-node one
    does); at it, every matching tray decides; a node with no clique label is no tray."""
    rack = policy("rack-xid", {"kind": "xid", "codes": [79]}, scope="domain", quorum_percent=50)
    tray = policy("tray-xid", {"kind": "xid", "codes": [79]})
    labels = {**LABELS, "plain": {}}
    history = History(labels=labels)
    few = [signal(f"nvl-r0-t{t:02d}", "xid", code=79) for t in range(8)] + [
        signal("plain", "xid", code=79)
    ]
    result = evaluate(few, history, [rack, tray], T0, SETTINGS)
    assert {d.policy for d in result.decisions} == {"tray-xid"} and len(result.decisions) == 9
    half = [signal(f"nvl-r0-t{t:02d}", "xid", code=79) for t in range(9)]
    result = evaluate(half, history, [rack, tray], T0, SETTINGS)
    assert {d.policy for d in result.decisions} == {"rack-xid"} and len(result.decisions) == 9


def test_evaluate_carries_the_policy_scope() -> None:
    rack = policy("rack-fault", {"kind": "xid", "codes": [79]}, scope="domain")
    result = evaluate([signal("nvl-r0-t03", "xid", code=79)], History(), [rack], T0, SETTINGS)
    assert [d.scope for d in result.decisions] == ["domain"]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("    scope: rack\n", "p.yaml:7: policies[0].scope: Input should be 'node', 'clique' or"),
        (
            "    scope: domain\n    when: {before_deadline: 1h}\n",
            "p.yaml:2: policies[0]: scope: domain and when:",
        ),
        ("    quorum_percent: 50\n", "p.yaml:2: policies[0]: quorum_percent needs scope: clique"),
        (
            "    scope: domain\n    quorum_percent: 150\n",
            "p.yaml:8: policies[0].quorum_percent: Input should be less than or equal to 100",
        ),
    ],
)
def test_policy_validate_checks_scope_with_file_and_line(
    tmp_path: Path, extra: str, expected: str
) -> None:
    match = "{kind: maintenance}" if "when" in extra else "{kind: xid, codes: [79]}"
    (tmp_path / "p.yaml").write_text(
        "policies:\n  - name: x\n    description: d\n    why: w\n"
        f"    match: {match}\n    actions: [{{action: drain}}, {{action: replace}}]\n" + extra
    )
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    assert any(p.startswith(expected) for p in caught.value.problems), caught.value.problems


RACK_POLICY = """\
policies:
  - name: rack-down
    description: a rack's trays NotReady together
    why: the NVLink domain is one unit
    match: {kind: node_condition, labels: {type: Ready}}
    scope: domain
    actions: [{action: cordon}, {action: drain}, {action: replace}]
"""


def rack_fleet() -> list[dict[str, object]]:
    return [
        {
            "name": f"nvl-r{r}-t{t:02d}",
            "pool": "nvl",
            "labels": {
                CLIQUE_LABEL: f"rack{r}-uuid.0",
                "remediator.io/rack": f"rack-{r}",
                "remediator.io/tray": str(t),
            },
        }
        for r in range(2)
        for t in range(18)
    ]


def test_scenario_eighteen_trays_not_ready_open_one_domain_remediation(tmp_path: Path) -> None:
    (tmp_path / "rack.yaml").write_text(RACK_POLICY)
    not_ready = [
        {
            "node": f"nvl-r0-t{t:02d}",
            "kind": "node_condition",
            "code": 1,
            "labels": {"type": "Ready"},
        }
        for t in range(18)
    ]
    data = {
        "name": "rack 0 loses power",
        "fleet": rack_fleet(),
        "timeline": [
            {"at": "0s", "signals": not_ready},
            {"at": "1m", "signals": not_ready[:3]},
            {"at": "2m", "signals": [{**not_ready[0], "node": "nvl-r1-t04"}]},
        ],
        "expect": [
            {"at": "0s", "node": "nvl-r0-t00", "policy": "rack-down"},
            {"at": "0s", "node": "nvl-r0-t05", "policy": "none"},
            {"at": "1m", "node": "nvl-r0-t01", "policy": "none"},
            {"at": "2m", "node": "nvl-r1-t04", "policy": "rack-down", "outcome": "held"},
        ],
    }
    outcomes = run_scenario(Scenario.model_validate(data), load_policy_dir(tmp_path))
    assert [o.passed for o in outcomes] == [True] * 4, outcomes
