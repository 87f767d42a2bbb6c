"""The HTTP provider and the replace/verify actions against the simulator's node-pool API."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from remediator.actions.outcome import Done, Failed, Held
from remediator.actions.replace import check_capacity, replace_node
from remediator.actions.verify import verify_replacement
from remediator.clock import utcnow
from remediator.kube.client import KubeClient
from remediator.providers.base import CapacityExhausted, OperationState
from remediator.providers.http import HttpNodePoolProvider
from tests.fixtures.sim import SimHandle
from tests.integration.actions_support import until_settled

pytestmark = pytest.mark.integration

POOL = "h100-train"
NODE = "h100-train-0000"


@pytest.fixture
def provider(sim: SimHandle) -> Iterator[HttpNodePoolProvider]:
    p = HttpNodePoolProvider(sim.nodepool_url, timeout=5.0, max_total_seconds=20.0)
    yield p
    p.close()


@pytest.fixture
def kube(sim: SimHandle) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(sim.kubeconfig) as client:
        yield client


def fault(sim: SimHandle, rule: dict[str, object]) -> None:
    httpx.post(f"{sim.inject_url}/v1/nodepool-faults", json=rule, timeout=5).raise_for_status()


def test_lost_reply_and_repeat_still_replace_exactly_once(
    sim: SimHandle, provider: HttpNodePoolProvider, kube: KubeClient
) -> None:
    before = {n.name for n in kube.list_nodes()}
    spare = provider.spare_capacity(POOL)
    assert spare is not None and spare > 0
    # The API takes the request but the answer is lost: the retry must find the same operation.
    fault(sim, {"type": "error", "status": 500, "count": 1, "after_processing": True})
    first = provider.request_replacement(POOL, NODE, "rem-42", "xid 79")
    again = provider.request_replacement(POOL, NODE, "rem-42", "xid 79")
    assert again.id == first.id
    assert provider.spare_capacity(POOL) == spare - 1

    started = utcnow()
    done = until_settled(
        lambda: replace_node(
            provider,
            pool=POOL,
            node=NODE,
            idempotency_key="rem-42",
            reason="xid 79",
            started_at=started,
            now=utcnow(),
            operation_id=first.id,
        )
    )
    assert isinstance(done, Done), done
    new_node = done.facts["new_node"]
    assert provider.get_operation(first.id).state is OperationState.SUCCEEDED

    verified = until_settled(
        lambda: verify_replacement(
            kube, old_node=NODE, new_node=new_node, started_at=started, now=utcnow()
        )
    )
    assert isinstance(verified, Done), verified
    after = {n.name for n in kube.list_nodes()}
    assert after == (before - {NODE}) | {new_node}
    assert kube.get_node(new_node).labels["simcloud.io/nodepool"] == POOL
    # A restart that has lost the operation id asks again with the key: still the same node.
    replay = replace_node(
        provider,
        pool=POOL,
        node=NODE,
        idempotency_key="rem-42",
        reason="xid 79",
        started_at=started,
        now=utcnow(),
    )
    assert isinstance(replay, Done) and replay.facts["new_node"] == new_node
    assert {n.name for n in kube.list_nodes()} == after


def test_no_spare_capacity_holds(sim: SimHandle, provider: HttpNodePoolProvider) -> None:
    fault(sim, {"type": "spare_capacity", "pool": POOL, "spare": 0})
    assert provider.spare_capacity(POOL) == 0
    assert isinstance(check_capacity(provider, POOL), Held)
    with pytest.raises(CapacityExhausted, match="no spare capacity"):
        provider.request_replacement(POOL, NODE, "rem-1", "thermal")
    held = replace_node(
        provider,
        pool=POOL,
        node=NODE,
        idempotency_key="rem-1",
        reason="thermal",
        started_at=utcnow(),
        now=utcnow(),
    )
    assert isinstance(held, Held) and POOL in held.reason


def test_throttling_and_errors_are_retried(sim: SimHandle, provider: HttpNodePoolProvider) -> None:
    fault(sim, {"type": "throttle", "count": 1, "retry_after": 1})
    started = time.monotonic()
    assert provider.spare_capacity(POOL) is not None
    assert time.monotonic() - started >= 0.9  # Retry-After honoured
    fault(sim, {"type": "error", "status": 503, "count": 2})
    assert provider.spare_capacity(POOL) is not None


def test_failed_operation_fails_the_step(sim: SimHandle, provider: HttpNodePoolProvider) -> None:
    fault(sim, {"type": "fail_next", "count": 1, "code": "boot_failed", "message": "no POST"})
    started = utcnow()
    failed = until_settled(
        lambda: replace_node(
            provider,
            pool=POOL,
            node=NODE,
            idempotency_key="rem-9",
            reason="ecc",
            started_at=started,
            now=utcnow(),
        )
    )
    assert isinstance(failed, Failed) and "boot_failed: no POST" in failed.reason
