"""Pod defaulting and admission as a real API server applies them on create."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from remediator.sim.kube.api.admission import (
    DEFAULT_TOLERATIONS,
    Forbidden,
    admit_pod,
    check_priority,
    pull_policy,
    qos_class,
    quantity,
)
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.builders import pod_from_template


def bare(**spec: Any) -> Obj:
    return {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec},
    }


def test_a_bare_pod_gets_every_default() -> None:
    pod = bare()
    admit_pod(pod)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["enableServiceLinks"] is True
    assert spec["serviceAccountName"] == spec["serviceAccount"] == "default"
    assert spec["priority"] == 0 and spec["preemptionPolicy"] == "PreemptLowerPriority"
    assert spec["securityContext"] == {}
    assert spec["tolerations"] == list(DEFAULT_TOLERATIONS)
    container = spec["containers"][0]
    assert container["imagePullPolicy"] == "Always"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert container["resources"] == {}
    assert pod["status"]["qosClass"] == "BestEffort"


def test_what_the_client_set_is_kept() -> None:
    pod = bare(
        restartPolicy="Never",
        terminationGracePeriodSeconds=120,
        serviceAccountName="trainer",
        schedulerName="volcano",
        tolerations=[{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}],
    )
    admit_pod(pod)
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["terminationGracePeriodSeconds"] == 120
    assert spec["serviceAccountName"] == spec["serviceAccount"] == "trainer"
    assert spec["schedulerName"] == "volcano"
    # Any-effect toleration of `unreachable` counts; only not-ready is added.
    assert [t["key"] for t in spec["tolerations"]] == [
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ]


def test_a_toleration_of_every_taint_needs_no_defaults() -> None:
    pod = bare(tolerations=[{"operator": "Exists"}])
    admit_pod(pod)
    assert pod["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_a_no_schedule_toleration_does_not_count() -> None:
    own = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
    pod = bare(tolerations=[own])
    admit_pod(pod)
    assert pod["spec"]["tolerations"] == [own, *DEFAULT_TOLERATIONS]


def test_priority_comes_from_the_class() -> None:
    pod = bare(priorityClassName="system-node-critical")
    check_priority(pod)
    admit_pod(pod)
    assert pod["spec"]["priority"] == 2000001000
    check_priority(pod)  # admitted once, it passes again unchanged (a requeued gang member)
    with pytest.raises(Forbidden, match="no PriorityClass with name gold"):
        check_priority(bare(priorityClassName="gold"))
    with pytest.raises(Forbidden, match="computed 0"):
        check_priority(bare(priority=5))


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.27", "IfNotPresent"),
        ("registry.local:5000/team/img", "Always"),
        ("registry.local:5000/team/img:v2", "IfNotPresent"),
        ("img@sha256:" + "0" * 64, "IfNotPresent"),
    ],
)
def test_pull_policy(image: str, policy: str) -> None:
    assert pull_policy(image) == policy


def test_quantities() -> None:
    assert quantity("1") == quantity("1000m") == Decimal(1)
    assert quantity("1Gi") == Decimal(2**30)
    assert quantity("1e3") == Decimal(1000)
    assert quantity("lots") == 0


def container(requests: dict[str, str] | None, limits: dict[str, str] | None) -> Obj:
    resources: Obj = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "x", "resources": resources}


def test_qos_classes() -> None:
    gpu_only = container(None, {"nvidia.com/gpu": "8"})
    assert qos_class({"containers": [gpu_only]}) == "BestEffort"
    exact = container({"cpu": "1000m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})
    assert qos_class({"containers": [exact]}) == "Guaranteed"
    cpu_only = container(None, {"cpu": "1"})
    assert qos_class({"containers": [exact, cpu_only]}) == "Burstable"
    asks = container({"cpu": "100m"}, None)
    assert qos_class({"containers": [asks]}) == "Burstable"


def test_limits_become_requests_before_the_class_is_computed() -> None:
    pod = bare()
    pod["spec"]["containers"] = [container(None, {"cpu": "2", "memory": "4Gi"})]
    admit_pod(pod)
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert pod["status"]["qosClass"] == "Guaranteed"


def test_controllers_use_the_same_admission() -> None:
    template = {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}
    made = pod_from_template(template, "r-1", "ns", None, datetime(2026, 1, 1, tzinfo=UTC))
    posted = bare()
    posted["spec"]["containers"][0]["image"] = "nginx:1"
    admit_pod(posted)
    assert made["spec"] == posted["spec"]
    assert made["status"]["qosClass"] == posted["status"]["qosClass"]
