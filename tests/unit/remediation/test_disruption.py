"""GPU-hours of workload disrupted, from the drain's timeline facts and one look at the owners'
pods: GPUs times eviction until a replacement of the same owner runs."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from remediator.kube.objects import OwnerRef, Pod, format_time, pod_gpus
from remediator.model.disruption import (
    Eviction,
    disrupted_gpu_hours,
    evictions,
    rescheduled,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = OwnerRef("Job", "llama-train", "job-uid", controller=True)
RS = OwnerRef("ReplicaSet", "web-7d9", "rs-uid", controller=True)


def _entry(name: str, uid: str, state: str, at: datetime, gpus: int, owner: OwnerRef | None):
    entry: dict[str, Any] = {
        "pod": f"train/{name}",
        "uid": uid,
        "gpus": gpus,
        "state": state,
        "sigterm_at": format_time(at),
    }
    if owner is None:
        entry["unmanaged"] = True
    else:
        entry["owner"] = {"kind": owner.kind, "name": owner.name, "uid": owner.uid}
    return entry


def _pod(uid: str, owner: OwnerRef | None, created: datetime, running: datetime | None) -> Pod:
    return Pod(
        "train",
        f"pod-{uid}",
        uid,
        owners=(owner,) if owner else (),
        phase="Running" if running else "Pending",
        created_at=created,
        running_since=running,
    )


def test_evictions_come_from_the_drain_progress_first_sighting_wins() -> None:
    details = [
        {"pods": [_entry("a", "u1", "pending", T0, 8, JOB)]},
        {"pods": [_entry("a", "u1", "evicted", T0, 8, JOB), {"pod": "x/old", "uid": "u9"}]},
        # Next round: terminating, with the API's (slightly different) SIGTERM time.
        {"pods": [_entry("a", "u1", "terminating", T0 + timedelta(seconds=2), 8, JOB)]},
        {"pods": [_entry("b", "u2", "blocked", T0, 4, RS)]},  # never evicted
        {"pods": [_entry("c", "u3", "terminating", T0, 4, RS)]},  # someone else deleted it
        None,
    ]
    (only,) = evictions(details)
    assert (only.pod, only.uid, only.gpus, only.owner_uid, only.evicted_at) == (
        "train/a",
        "u1",
        8,
        "job-uid",
        T0,
    )
    assert only.namespace == "train"


def test_a_gangs_pods_count_until_their_replacements_run() -> None:
    evicted = evictions(
        [
            {
                "pods": [
                    _entry("w0", "u0", "evicted", T0, 8, JOB),
                    _entry("w1", "u1", "evicted", T0 + timedelta(seconds=1), 8, JOB),
                ]
            }
        ]
    )
    later = T0 + timedelta(minutes=30)
    pods = [
        _pod("u0", JOB, T0 - timedelta(days=1), T0 - timedelta(days=1)),  # the evicted one
        _pod("older", JOB, T0 - timedelta(hours=1), T0),  # a sibling from before: not a replacement
        _pod("n1", JOB, T0 + timedelta(seconds=5), later + timedelta(minutes=30)),
        _pod("n0", JOB, T0 + timedelta(seconds=5), later),
        _pod("n2", JOB, T0 + timedelta(seconds=5), None),  # still pending
        # The requeued gang's other old member, still Running while it terminates.
        replace(
            _pod("old1", JOB, T0, T0 + timedelta(seconds=1)),
            deletion_timestamp=T0 + timedelta(seconds=30),
        ),
        _pod("other", RS, T0 + timedelta(seconds=5), T0 + timedelta(seconds=10)),
    ]
    done = rescheduled(evicted, pods)
    assert [(e.uid, e.rescheduled_at) for e in done] == [
        ("u0", later),
        ("u1", later + timedelta(minutes=30)),
    ]
    # 8 GPUs for half an hour, 8 for an hour (minus the second between the evictions).
    end = T0 + timedelta(hours=5)
    assert disrupted_gpu_hours(done, end) == pytest.approx(4 + 8 * (3600 - 1) / 3600)
    # Written to the timeline and read back: the check's result supersedes the progress.
    again = evictions(
        [
            {"pods": [_entry("w0", "u0", "evicted", T0, 8, JOB)]},
            {"disrupted": [e.facts() for e in done]},
        ]
    )
    assert {e.uid: e.rescheduled_at for e in again} == {"u0": later, "u1": done[1].rescheduled_at}


def test_unowned_or_unreplaced_pods_count_until_the_end() -> None:
    evicted = (
        Eviction("train/bare", "b", 2, None, T0),
        Eviction("train/w", "w", 4, "job-uid", T0),
        Eviction("train/cpu", "c", 0, "rs-uid", T0),
    )
    done = rescheduled(evicted, [_pod("b2", None, T0, T0 + timedelta(minutes=1))])
    assert all(e.rescheduled_at is None for e in done)
    assert disrupted_gpu_hours(done, T0 + timedelta(hours=2)) == pytest.approx(12.0)
    assert disrupted_gpu_hours((), T0) == 0.0


def test_pod_gpus_from_requests_or_limits() -> None:
    def container(**resources: dict[str, str]) -> dict[str, Any]:
        return {"name": "c", "resources": resources}

    gpu = "nvidia.com/gpu"
    spec = {
        "containers": [
            container(limits={gpu: "4"}),
            container(requests={gpu: "2"}, limits={gpu: "2"}),
            container(requests={"cpu": "1"}),
        ],
        "initContainers": [container(limits={gpu: "8"})],
    }
    assert pod_gpus(spec) == 8  # the init container needs all eight first
    spec["initContainers"] = []
    assert pod_gpus(spec) == 6
    assert pod_gpus({"containers": [container(limits={gpu: "x"})]}) == 0


def test_pod_running_since_is_its_ready_transition() -> None:
    ready = "2026-03-01T12:05:00Z"
    raw = {
        "metadata": {"name": "p", "namespace": "n", "creationTimestamp": "2026-03-01T12:00:00Z"},
        "status": {
            "phase": "Running",
            "startTime": "2026-03-01T12:01:00Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready}],
        },
    }
    pod = Pod.from_json(raw)
    assert pod.created_at == T0 and pod.running_since == T0 + timedelta(minutes=5)
    raw["status"]["conditions"] = []
    assert Pod.from_json(raw).running_since == T0 + timedelta(minutes=1)
    raw["status"]["phase"] = "Pending"
    assert Pod.from_json(raw).running_since is None
