"""KubeClient against a simulated apiserver in trouble: errors classified once, at the edge;
Retry-After carried; evictions the API did not take told apart from budget refusals; a 404 on an
eviction believed only when a fresh read agrees; writes fenced when this replica may not act."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from remediator.errors import ApiUnavailable, NotActing
from remediator.kube.client import KubeClient
from remediator.kube.objects import EvictionResult
from remediator.kube.ratelimit import TokenBucket
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration


@pytest.fixture
def kube(sim: SimHandle) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(sim.kubeconfig, timeout=5.0) as client:
        client.set_user_agent("remediator/test (client-faults)")
        yield client


def fault(sim: SimHandle, body: dict[str, Any]) -> None:
    response = httpx.post(f"{sim.inject_url}/v1/kube-faults", json=body, timeout=10.0)
    assert response.status_code == 200, response.text


def a_pod(kube: KubeClient) -> tuple[str, str, str]:
    node = next(n.name for n in kube.list_nodes() if n.name.startswith("h100-train"))
    pod = next(p for p in kube.list_pods_on_node(node) if not p.daemonset_owned)
    return pod.namespace, pod.name, pod.uid


def test_unavailable_answers_carry_status_and_retry_after(sim: SimHandle, kube: KubeClient) -> None:
    fault(sim, {"type": "error", "status": 429, "verbs": ["list"], "count": 1, "retry_after": 7})
    with pytest.raises(ApiUnavailable) as caught:
        kube.list_nodes()
    assert caught.value.status == 429 and caught.value.delay == 7.0
    assert "Too many requests" in str(caught.value)
    fault(sim, {"type": "reset", "verbs": ["get"], "resources": ["nodes"], "count": 1})
    name = kube.list_nodes()[0].name
    with pytest.raises(ApiUnavailable) as lost:
        kube.get_node(name)
    assert lost.value.status == 0
    assert kube.get_node(name).name == name


def test_evictions_the_api_did_not_take_are_not_budget_refusals(
    sim: SimHandle, kube: KubeClient
) -> None:
    namespace, name, uid = a_pod(kube)
    fault(sim, {"type": "error", "status": 503, "resources": ["pods/eviction"], "count": 1})
    outcome = kube.evict_pod(namespace, name, 1, uid)
    assert outcome.result is EvictionResult.API_UNAVAILABLE and outcome.retry_after == 1.0
    fault(
        sim,
        {
            "type": "error",
            "status": 429,
            "resources": ["pods/eviction"],
            "count": 1,
            "retry_after": 5,
        },
    )
    throttled = kube.evict_pod(namespace, name, 1, uid)
    assert throttled.result is EvictionResult.API_UNAVAILABLE and throttled.retry_after == 5.0
    assert kube.get_pod(namespace, name).deletion_timestamp is None
    assert kube.evict_pod(namespace, name, 1, uid).result is EvictionResult.EVICTED


def test_an_eviction_404_is_gone_only_when_a_fresh_read_agrees(kube: KubeClient) -> None:
    namespace, _, _ = a_pod(kube)
    missing = kube.evict_pod(namespace, "no-such-pod", 1, "some-uid")
    assert missing.result is EvictionResult.NOT_FOUND


def test_writes_are_fenced_reads_are_not(kube: KubeClient) -> None:
    leading = [True]
    guarded = kube.guarded(limiter=TokenBucket(100.0, 10), may_write=lambda: leading[0])
    name = guarded.list_nodes()[0].name
    guarded.cordon(name)
    leading[0] = False
    with pytest.raises(NotActing):
        guarded.uncordon(name)
    with pytest.raises(NotActing):
        guarded.evict_pod("default", "anything", 1)
    assert guarded.get_node(name).unschedulable  # reads go on; nothing was written
    kube.uncordon(name)  # the unguarded client (leader election's) is not fenced
