"""The Cluster API provider's pure decisions: which Machines may be deleted, and what a
MachineDeployment's maxSurge says about spare capacity, and when a new Machine has failed."""

from __future__ import annotations

from typing import Any

import pytest

from remediator.errors import PermanentError
from remediator.providers.base import ReplacementHeld, ReplacementPaused
from remediator.providers.clusterapi import machine_failure, max_surge, record_key, refusal


def obj(kind: str, name: str, **meta: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": "default", **meta}, "spec": {}}


def test_a_plain_worker_machine_may_be_deleted() -> None:
    assert refusal(obj("Machine", "m"), [obj("MachineSet", "ms")]) is None


def test_control_plane_is_refused_and_opt_outs_are_held_with_the_reason() -> None:
    cp = obj("Machine", "cp", labels={"cluster.x-k8s.io/control-plane": ""})
    assert isinstance(refusal(cp, []), PermanentError)
    assert "control-plane" in str(refusal(cp, []))
    skip = obj("Machine", "m", annotations={"cluster.x-k8s.io/skip-remediation": ""})
    held = refusal(skip, [])
    assert isinstance(held, ReplacementHeld) and "skip-remediation" in str(held)
    assert not isinstance(held, ReplacementPaused)  # an opt-out is for a human to lift
    paused_owner = obj("MachineDeployment", "md", annotations={"cluster.x-k8s.io/paused": ""})
    held = refusal(obj("Machine", "m"), [paused_owner])
    assert isinstance(held, ReplacementPaused)  # a pause lifts by itself: the step asks again
    assert "MachineDeployment default/md is paused (annotation cluster.x-k8s.io/paused)" in str(
        held
    )
    spec_paused = {**obj("MachineSet", "ms"), "spec": {"paused": True}}
    assert isinstance(refusal(obj("Machine", "m"), [spec_paused]), ReplacementPaused)


def test_a_paused_machinedeployment_is_named_with_how_it_was_paused() -> None:
    """`clusterctl alpha rollout pause` sets spec.paused: the hold names the MachineDeployment
    and spec.paused, not an annotation it does not carry."""
    rollout_paused = {**obj("MachineDeployment", "md"), "spec": {"paused": True}}
    held = refusal(obj("Machine", "m"), [obj("MachineSet", "ms"), rollout_paused])
    assert isinstance(held, ReplacementHeld)
    assert str(held).startswith(
        "Machine default/m: MachineDeployment default/md is paused (spec.paused)"
    )
    assert "annotation" not in str(held)


def test_a_paused_cluster_holds_and_false_is_no_pause() -> None:
    cluster = {**obj("Cluster", "prod"), "spec": {"paused": True}}
    assert isinstance(refusal(obj("Machine", "m"), [], cluster), ReplacementPaused)
    held = refusal(obj("Machine", "m"), [obj("MachineSet", "ms")], cluster)
    assert isinstance(held, ReplacementHeld)
    assert "Cluster default/prod is paused (spec.paused" in str(held)
    running = {**obj("Cluster", "prod"), "spec": {"paused": False}}
    unpaused = obj("MachineSet", "ms", annotations={"cluster.x-k8s.io/paused": "false"})
    assert refusal(obj("Machine", "m"), [unpaused], running) is None


@pytest.mark.parametrize(
    ("surge", "replicas", "expected"),
    [(None, 4, None), (0, 4, 0), (2, 4, 2), ("25%", 10, 3), ("100%", 3, 3)],
)
def test_max_surge_as_a_count(surge: object, replicas: int, expected: int | None) -> None:
    rolling = {} if surge is None else {"rollingUpdate": {"maxSurge": surge}}
    md = {"spec": {"replicas": replicas, "strategy": rolling}}
    assert max_surge(md) == expected


def test_record_keys_are_valid_annotation_names_and_distinct() -> None:
    a, b = record_key("remediation-1/replace/1"), record_key("remediation-2/replace/1")
    assert a != b
    prefix, _, name = a.partition("/")
    assert prefix == "replacement.remediator.io" and len(name) <= 63


def test_a_machine_failed_as_cluster_api_reports_it_names_reason_and_message() -> None:
    assert machine_failure("m", {"phase": "Provisioning"}) is None
    assert machine_failure("m", {"phase": "Running", "nodeRef": {"name": "n"}}) is None
    failed = machine_failure(
        "m",
        {
            "phase": "Failed",
            "failureReason": "InsufficientResources",
            "failureMessage": "InsufficientInstanceCapacity: no p5.48xlarge in zone a",
        },
    )
    assert failed == (
        "InsufficientResources: Machine m failed: "
        "InsufficientInstanceCapacity: no p5.48xlarge in zone a"
    )
    assert machine_failure("m", {"phase": "Failed"}) == "Failed: Machine m failed: phase Failed"
