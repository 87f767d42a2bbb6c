"""Parsing raw API JSON into our views, eviction refusals, and the lease takeover rule."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from kubernetes.client.exceptions import ApiException

from remediator.errors import ConflictError, NotFoundError, PermanentError, TransientError
from remediator.kube.client import classify_eviction_error, wrap_api_exception
from remediator.kube.leader import next_record
from remediator.kube.objects import EvictionResult, Lease, Node, Pod, Taint, format_micro_time

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_node_from_json() -> None:
    node = Node.from_json(
        {
            "metadata": {
                "name": "gpu-1",
                "uid": "u1",
                "resourceVersion": "42",
                "labels": {"simcloud.io/nodepool": "a"},
                "creationTimestamp": "2026-01-01T12:00:00Z",
            },
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
            },
        }
    )
    assert node.ready and node.unschedulable and node.created_at == T0
    assert node.has_taint(Taint("node.kubernetes.io/unschedulable", "x", "NoSchedule"))
    assert not node.has_taint(Taint("node.kubernetes.io/unschedulable", "", "NoExecute"))


def test_pod_from_json() -> None:
    pod = Pod.from_json(
        {
            "metadata": {
                "name": "w-1",
                "namespace": "ml",
                "uid": "u",
                "ownerReferences": [{"kind": "ReplicaSet", "name": "w", "controller": True}],
                "deletionTimestamp": "2026-01-01T12:02:00Z",
                "deletionGracePeriodSeconds": 120,
            },
            "spec": {"nodeName": "gpu-1", "volumes": [{"name": "scratch", "emptyDir": {}}]},
            "status": {"phase": "Running"},
        }
    )
    assert pod.key == "ml/w-1" and pod.controller is not None
    assert pod.terminating and pod.sigterm_at == T0 and pod.uses_empty_dir
    assert not pod.daemonset_owned and not pod.mirror


def test_lease_round_trip_and_expiry() -> None:
    lease = Lease("ns", "l", "me", 15, T0, T0 + timedelta(microseconds=5), 3, "7")
    raw = lease.to_json()
    assert raw["spec"]["renewTime"] == "2026-01-01T12:00:00.000005Z"
    assert Lease.from_json(raw) == lease
    assert not lease.expired(15)
    assert lease.expired(16)
    assert Lease("ns", "l", None, 15, T0, T0, 3, "7").expired(0)


def test_next_record() -> None:
    fresh = next_record(None, "me", T0, 15, 0)
    assert fresh is not None and fresh.holder == "me" and fresh.transitions == 0
    mine = Lease("ns", "l", "me", 15, T0, T0, 2, "9")
    renewed = next_record(mine, "me", T0 + timedelta(seconds=2), 15, 2)
    assert renewed is not None
    assert renewed.acquire_time == T0 and renewed.renew_time == T0 + timedelta(seconds=2)
    assert renewed.transitions == 2 and renewed.resource_version == "9"
    theirs = Lease("ns", "l", "other", 15, T0, T0, 2, "9")
    assert next_record(theirs, "me", T0 + timedelta(seconds=10), 15, 10) is None
    taken = next_record(theirs, "me", T0 + timedelta(seconds=16), 15, 16)
    assert taken is not None and taken.holder == "me" and taken.transitions == 3
    # Our wall clock an hour ahead of the holder's: its renewTime looks stale, but we have only
    # just seen this version of the lease, so it is still held.
    assert next_record(theirs, "me", T0 + timedelta(hours=1), 15, 0) is None
    released = Lease("ns", "l", None, 1, T0, T0, 3, "10")
    again = next_record(released, "me", T0, 15, 0)
    assert again is not None and again.transitions == 4
    assert format_micro_time(T0) == "2026-01-01T12:00:00.000000Z"


def status(message: str, code: int, causes: list[dict[str, str]] | None = None) -> str:
    body: dict[str, object] = {"kind": "Status", "message": message, "code": code}
    if causes:
        body["details"] = {"causes": causes}
    return json.dumps(body)


def test_eviction_refusals() -> None:
    pdb = classify_eviction_error(
        429,
        status(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            429,
            [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
                }
            ],
        ),
        None,
    )
    assert pdb.result is EvictionResult.BLOCKED_BY_PDB
    assert "web needs 2 healthy pods" in pdb.message
    throttled = classify_eviction_error(429, status("too many requests", 429), 3.0)
    # API Priority and Fairness, not a budget: the API did not take it; wait its Retry-After.
    assert throttled.result is EvictionResult.API_UNAVAILABLE and throttled.retry_after == 3.0
    down = classify_eviction_error(503, status("unable to handle the request", 503), None)
    assert down.result is EvictionResult.API_UNAVAILABLE and down.retry_after == 1.0
    many = classify_eviction_error(
        500,
        status(
            "This pod has more than one PodDisruptionBudget, "
            "which the eviction subresource does not support.",
            500,
        ),
        None,
    )
    assert many.result is EvictionResult.MULTIPLE_PDBS
    assert (
        classify_eviction_error(404, status("gone", 404), None).result is EvictionResult.NOT_FOUND
    )
    assert classify_eviction_error(503, "<html>", None).result is EvictionResult.API_UNAVAILABLE


def test_api_errors_map_onto_ours() -> None:
    def exc(code: int) -> ApiException:
        e = ApiException(status=code, reason="r", body=status(f"m{code}", code))
        e.headers = {"Retry-After": "4"}
        return e

    assert isinstance(wrap_api_exception(exc(404), "x"), NotFoundError)
    assert isinstance(wrap_api_exception(exc(409), "x"), ConflictError)
    throttled = wrap_api_exception(exc(429), "x")
    assert isinstance(throttled, TransientError) and throttled.delay == 4.0
    assert isinstance(wrap_api_exception(exc(503), "x"), TransientError)
    forbidden = wrap_api_exception(exc(403), "get node")
    assert isinstance(forbidden, PermanentError) and str(forbidden) == "get node: 403 m403"
