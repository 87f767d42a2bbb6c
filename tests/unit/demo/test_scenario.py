"""The scenario's choices: which fault, on which node, and what it will do to the cluster."""

from __future__ import annotations

import random
from typing import Any

import pytest

from remediator.demo.scenario import (
    FIRST_ROUND,
    GUARDED_NAMESPACE,
    LATER_ROUNDS,
    AwaitPod,
    Create,
    Fault,
    Fleet,
    NodePoolRule,
    Pause,
    kind_for,
    plan_episode,
)
from remediator.demo.slurm_jobs import slurm_banner
from remediator.sim.fleet import INFER_POOL, TRAIN_POOL
from remediator.sim.kube.api.kobj import OPT_OUT_LABEL, POOL_LABEL


def node(name: str, pool: str, ready: bool = True, cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def fleet() -> Fleet:
    return Fleet.from_json(
        [
            node("t0", TRAIN_POOL),
            node("t1", TRAIN_POOL),
            node("t2", TRAIN_POOL, cordoned=True),
            node("t3", TRAIN_POOL, ready=False),
            node("t9", TRAIN_POOL),
            node("i0", INFER_POOL),
        ],
        [{"metadata": {"labels": {OPT_OUT_LABEL: "true"}}, "spec": {"nodeName": "t9"}}],
    )


def test_fleet_reads_pools_health_and_opt_out_hosts() -> None:
    seen = fleet()
    assert seen.pools() == [INFER_POOL, TRAIN_POOL]
    assert seen.opt_out == {"t9"}
    assert seen.candidates([TRAIN_POOL], frozenset()) == ["t0", "t1"]
    assert seen.candidates([TRAIN_POOL], frozenset({"t0", "t1"})) == ["i0"]
    assert seen.candidates([INFER_POOL, TRAIN_POOL], frozenset()) == ["i0"]
    assert seen.candidates([TRAIN_POOL], frozenset({"t0", "t1", "i0"})) == []


def test_first_round_in_order_then_only_self_healing_faults() -> None:
    rng = random.Random(3)
    assert [kind_for(i, rng) for i in range(len(FIRST_ROUND))] == list(FIRST_ROUND)
    later = {kind_for(i, rng) for i in range(len(FIRST_ROUND), 200)}
    assert later == set(LATER_ROUNDS)
    assert not later & {"opt-out", "approval", "pdb", "no-capacity"}


def plan(kind: str, used: frozenset[str] = frozenset(), seed: int = 1) -> Any:
    return plan_episode(kind, fleet(), used, random.Random(seed), serial=4)


def test_opt_out_targets_the_node_running_the_opted_out_pod() -> None:
    episode = plan("opt-out")
    assert episode.node == "t9"
    (step,) = episode.steps
    assert isinstance(step, Fault) and step.body["code"] == 79
    assert "held_by_opt_out" in episode.expect
    assert plan("opt-out", frozenset({"t9"})) is None


def test_other_faults_avoid_the_opt_out_node_and_unhealthy_ones() -> None:
    for seed in range(20):
        for kind in ("xid-79", "xid-48", "approval", "overheat", "nvlink", "ib-link-down"):
            assert plan(kind, seed=seed).node in {"t0", "t1"}


def test_faults_that_replace_stay_in_the_training_pool() -> None:
    for kind in LATER_ROUNDS:
        assert plan(kind, frozenset({"t0", "t1"})) is None
    assert plan("approval", frozenset({"t0", "t1"})).node == "i0"
    assert plan("pdb", frozenset({"i0"})).node in {"t0", "t1"}


def test_pdb_episode_builds_a_guarded_service_on_an_inference_node_before_the_fault() -> None:
    episode = plan("pdb")
    assert episode.node == "i0"
    replicaset, budget, wait, fault = episode.steps
    assert isinstance(replicaset, Create) and isinstance(budget, Create)
    assert replicaset.path == f"/apis/apps/v1/namespaces/{GUARDED_NAMESPACE}/replicasets"
    template = replicaset.body["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "i0"}
    assert budget.body["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": replicaset.body["spec"]["selector"]["matchLabels"]},
    }
    assert replicaset.body["spec"]["replicas"] == 1  # so no eviction is ever allowed
    assert wait == AwaitPod(GUARDED_NAMESPACE, "app=checkout-api-4", "i0")
    assert isinstance(fault, Fault) and fault.body["code"] == 95


def test_approval_is_a_problem_detector_condition_carrying_the_kernel_line() -> None:
    (step,) = plan("approval").steps
    assert isinstance(step, Fault)
    assert step.body["condition"] == "GpuXidError" and step.body["status"] == "True"
    assert step.body["message"].startswith("NVRM: Xid (PCI:0000:")


def test_no_capacity_empties_the_inference_pool_before_the_fault() -> None:
    episode = plan("no-capacity")
    rule, fault = episode.steps
    assert episode.node == "i0"
    assert isinstance(rule, NodePoolRule)
    assert rule.body == {"type": "spare_capacity", "pool": INFER_POOL, "spare": 0}
    assert isinstance(fault, Fault) and fault.body["code"] == 48
    # Never the training pool, where the replacements of every later fault come from.
    assert plan("no-capacity", frozenset({"i0"})) is None


def test_nvlink_bursts_hit_three_different_gpus_with_pauses_between() -> None:
    steps = plan("nvlink").steps
    faults = [s for s in steps if isinstance(s, Fault)]
    assert len(faults) == 3 and sum(isinstance(s, Pause) for s in steps) == 2
    assert len({f.body["gpu"] for f in faults}) == 3
    assert all(f.body["type"] == "nvlink_errors" and f.body["count"] >= 50 for f in faults)


def test_the_same_seed_plans_the_same_faults() -> None:
    assert plan("overheat", seed=7) == plan("overheat", seed=7)


def test_no_node_left_means_no_episode_and_unknown_kinds_are_errors() -> None:
    assert plan("xid-79", frozenset({"t0", "t1", "i0"})) is None
    with pytest.raises(ValueError, match="unknown episode kind"):
        plan("meteor-strike")


def test_with_slurm_the_first_xid_79_hits_a_node_running_a_job_and_names_it() -> None:
    """`demo --slurm` (issue 22 item 15): the user is told which job to watch."""
    for seed in range(5):
        episode = plan_episode(
            "xid-79", fleet(), frozenset(), random.Random(seed), 1, {"t1": "7", "i0": "9"}
        )
        assert episode is not None and episode.node == "t1"  # the training pool's first
        assert "Slurm job 7" in episode.title and "squeue -j 7" in episode.expect
    elsewhere = plan_episode("xid-79", fleet(), frozenset({"t1"}), random.Random(1), 1, {"i0": "9"})
    assert elsewhere is not None and elsewhere.node == "i0" and "job 9" in elsewhere.expect
    without = plan_episode("xid-79", fleet(), frozenset(), random.Random(1), 1, {})
    assert without is not None and "Slurm" not in without.expect


def test_the_slurm_banner_names_the_jobs_to_watch(tmp_path: Any) -> None:
    lines = slurm_banner({"slurm_conf": "/x/slurm.conf"}, tmp_path, [3, 4])
    text = "\n".join(lines)
    assert "checkpointing jobs 3,4" in text and "first fault hits the node" in text
    assert "squeue -j JOB" in text and slurm_banner(None, tmp_path, []) == []
