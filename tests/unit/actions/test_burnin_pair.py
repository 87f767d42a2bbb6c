"""The optional two-node all-reduce: which node of the pool may be the peer, the check's
program, and its verdict over nccl-tests' multi-node output (the simulator's, whose layout
test_node_programs checks line by line)."""

from __future__ import annotations

import pytest

from remediator.actions import burnin
from remediator.actions.burnin import Checks
from remediator.kube.objects import Node, NodeCondition, Taint
from remediator.sim.node import nccl
from remediator.sim.node.hardware import build_profile

H100 = "NVIDIA H100 80GB HBM3"
FLOOR = {H100: 330.0}
ARGS = ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"]


def node(name: str, *, ready: bool = True, cordoned: bool = False, taint: str = "") -> Node:
    return Node(
        name=name,
        uid=name,
        resource_version="1",
        unschedulable=cordoned,
        taints=(Taint(taint),) if taint else (),
        conditions=(NodeCondition("Ready", "True" if ready else "False"),),
    )


POOL = [
    node("a"),  # the node under test
    node("b", cordoned=True),
    node("c", taint="remediator.io/unvalidated"),
    node("d", ready=False),
    node("e"),  # under another remediation
    node("f"),  # never validated
    node("h"),
    node("g"),
]
VALIDATED = ["a", "b", "c", "d", "e", "g", "h"]


def test_the_peer_is_a_validated_schedulable_node_outside_any_remediation() -> None:
    assert burnin.choose_peer("a", POOL, VALIDATED, busy=["e"]) == "g"
    assert burnin.choose_peer("a", POOL, VALIDATED, busy=["e", "g"]) == "h"
    assert burnin.choose_peer("a", POOL, VALIDATED, busy=["e", "g", "h"]) is None
    assert burnin.choose_peer("a", POOL, [], busy=[]) is None


def test_the_pair_check_is_off_by_default_and_has_no_program_without_a_peer() -> None:
    assert burnin.NCCL_PAIR not in Checks().enabled()
    on = Checks.from_json({"nccl_pair": True, "pair_busbw_floor": FLOOR})
    assert on.enabled()[-1] == burnin.NCCL_PAIR and on.pair_busbw_floor == FLOOR
    assert burnin.programs(burnin.NCCL_PAIR, dcgm_level=2, gpus=8, node="a") == {}
    (argv,) = burnin.programs(burnin.NCCL_PAIR, dcgm_level=2, gpus=8, node="a", peer="g").values()
    assert argv[:6] == ["mpirun", "--allow-run-as-root", "-np", "16", "-H", "a:8,g:8"]
    assert argv[6:] == ARGS


def test_no_peer_is_said_and_skipped_not_passed() -> None:
    verdict = burnin.no_peer_verdict("h100-train")
    assert not verdict.passed and verdict.evidence["skipped"] is True
    assert "skipped" in verdict.reason and "h100-train" in verdict.reason


def pair_output(down: int = 0, second: str = "g") -> str:
    hosts = [
        (nccl.Host(name, build_profile(name, name, 0, H100, 8), list(range(8)), 8 - d), 8)
        for name, d in (("a", 0), (second, down))
    ]
    return nccl.run_multi(ARGS, hosts).output


@pytest.mark.parametrize(("down", "passed"), [(0, True), (2, False)])
def test_the_pair_verdict_holds_the_bus_bandwidth_to_the_pair_floor(
    down: int, passed: bool
) -> None:
    verdict = burnin.nccl_pair_verdict(pair_output(down), H100, FLOOR, "a", "g")
    assert verdict.check == burnin.NCCL_PAIR and verdict.passed is passed, verdict.reason
    assert verdict.evidence["peer"] == "g" and verdict.evidence["hosts"] == ["a", "g"]
    assert "with g" in verdict.reason


def test_a_run_that_did_not_span_both_nodes_fails() -> None:
    verdict = burnin.nccl_pair_verdict(pair_output(second="z"), H100, FLOOR, "a", "g")
    assert not verdict.passed and "not on a and g" in verdict.reason


def test_unreadable_pair_output_fails_with_its_tail() -> None:
    verdict = burnin.nccl_pair_verdict("ssh: Could not resolve hostname g\n", H100, FLOOR, "a", "g")
    assert not verdict.passed and verdict.evidence["raw_tail"].startswith("ssh:")
