"""The PodDisruptionBudget math of the disruption controller and the eviction check, as pure
functions: integer and percentage minAvailable/maxUnavailable with Kubernetes' rounding,
healthy counting, disruptedPods expiry and the exact denial messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remediator.sim.kube.api.disruption import (
    DELETION_TIMEOUT,
    decrement,
    expected_and_desired,
    pdb_status,
    scaled_value,
    unhealthy_pod_may_go,
)
from remediator.sim.kube.api.kobj import rfc3339
from remediator.sim.kube.api.store import Obj, TooManyRequests

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def pod(
    name: str, ready: bool = True, owner: str | None = "rs-uid", terminating: bool = False
) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "labels": {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": "web", "uid": owner, "controller": True}
        ]
    if terminating:
        meta["deletionTimestamp"] = rfc3339(NOW)
    return {
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def budget(**spec: object) -> Obj:
    return {"metadata": {"name": "web-pdb", "namespace": "ns", "generation": 1}, "spec": spec}


def scale_10(namespace: str, ref: Obj) -> int | None:
    return 10 if ref["kind"] == "ReplicaSet" else None


@pytest.mark.parametrize(
    ("value", "total", "round_up", "expected"),
    [
        (3, 10, True, 3),
        ("3", 10, True, 3),
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("50%", 3, True, 2),
        ("50%", 3, False, 1),
        ("100%", 7, True, 7),
        ("0%", 7, True, 0),
    ],
)
def test_scaled_values_round_as_intstr_does(
    value: int | str, total: int, round_up: bool, expected: int
) -> None:
    assert scaled_value(value, total, round_up) == expected


@pytest.mark.parametrize(
    ("spec", "expected", "desired"),
    [
        ({"minAvailable": 2}, 4, 2),  # integer minAvailable counts the pods themselves
        ({"minAvailable": "50%"}, 10, 5),  # percentages use the controllers' scale
        ({"minAvailable": "33%"}, 10, 4),  # 3.3 rounds up
        ({"maxUnavailable": 1}, 10, 9),
        ({"maxUnavailable": "25%"}, 10, 7),  # 2.5 unavailable rounds up to 3
        ({"maxUnavailable": "100%"}, 10, 0),
    ],
)
def test_expected_and_desired_follow_get_expected_pod_count(
    spec: Obj, expected: int, desired: int
) -> None:
    pods = [pod(f"p{i}") for i in range(4)]
    assert expected_and_desired(budget(**spec), pods, scale_10) == (expected, desired)


def test_status_counts_ready_pods_that_are_neither_terminating_nor_disrupted() -> None:
    pods = [
        pod("a"),
        pod("b"),
        pod("c", ready=False),
        pod("d", terminating=True),
        pod("e"),
    ]
    pdb = budget(minAvailable=1)
    pdb["status"] = {"disruptedPods": {"e": rfc3339(NOW - timedelta(seconds=30))}}
    status = pdb_status(pdb, pods, scale_10, NOW)
    assert status["currentHealthy"] == 2
    assert status["desiredHealthy"] == 1
    assert status["expectedPods"] == 5
    assert status["disruptionsAllowed"] == 1
    assert status["disruptedPods"] == {"e": rfc3339(NOW - timedelta(seconds=30))}
    cond = status["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("True", "SufficientPods")


def test_a_disrupted_pod_not_deleted_in_time_counts_again() -> None:
    pdb = budget(minAvailable=1)
    pdb["status"] = {"disruptedPods": {"a": rfc3339(NOW - DELETION_TIMEOUT - timedelta(seconds=1))}}
    status = pdb_status(pdb, [pod("a"), pod("b")], scale_10, NOW)
    assert "disruptedPods" not in status
    assert status["currentHealthy"] == 2


def test_percentages_over_pods_without_a_scale_fail_sync() -> None:
    jobs = [pod("a", owner="job-uid")]
    jobs[0]["metadata"]["ownerReferences"][0]["kind"] = "Job"
    status = pdb_status(budget(maxUnavailable="10%"), jobs, scale_10, NOW)
    cond = status["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "SyncFailed")
    assert 'found no controllers for pod "a"' in cond["message"]
    assert status["disruptionsAllowed"] == 0


def test_transition_time_moves_only_when_the_condition_flips() -> None:
    pdb = budget(minAvailable=1)
    first = pdb_status(pdb, [pod("a"), pod("b")], scale_10, NOW)
    pdb["status"] = first
    later = pdb_status(pdb, [pod("a"), pod("b")], scale_10, NOW + timedelta(minutes=5))
    assert later["conditions"][0]["lastTransitionTime"] == rfc3339(NOW)
    pdb["status"] = later
    flipped = pdb_status(pdb, [pod("a")], scale_10, NOW + timedelta(minutes=6))
    assert flipped["conditions"][0]["lastTransitionTime"] == rfc3339(NOW + timedelta(minutes=6))
    assert flipped["conditions"][0]["reason"] == "InsufficientPods"


def test_decrement_spends_one_disruption_and_records_the_pod() -> None:
    pdb = budget(minAvailable=1)
    pdb["status"] = pdb_status(pdb, [pod("a"), pod("b")], scale_10, NOW)
    spent = decrement(pdb, "a", NOW)
    assert spent["status"]["disruptionsAllowed"] == 0
    assert spent["status"]["disruptedPods"] == {"a": rfc3339(NOW)}
    assert spent["status"]["conditions"][0]["status"] == "False"
    with pytest.raises(TooManyRequests) as err:
        decrement(spent, "b", NOW)
    # The stale counts are what the server quotes until the controller catches up.
    assert err.value.details == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget web-pdb does not allow evicting pods currently",
            }
        ]
    }


def test_unready_pods_may_go_when_the_budget_is_otherwise_met() -> None:
    pdb = budget(minAvailable=1)
    pdb["status"] = {"currentHealthy": 2, "desiredHealthy": 1}
    assert unhealthy_pod_may_go(pod("x", ready=False), pdb)
    assert not unhealthy_pod_may_go(pod("x", ready=True), pdb)
    pdb["status"] = {"currentHealthy": 0, "desiredHealthy": 1}
    assert not unhealthy_pod_may_go(pod("x", ready=False), pdb)
    pdb["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    assert unhealthy_pod_may_go(pod("x", ready=False), pdb)
