"""A crash between a provider's request and the controller's record of it, for the Cluster API and
Compute Engine providers against the simulator (`sim serve --cloud X`, the real client library on
the wire): the request went out, the process died before the operation id was stored, and a new
process — a fresh provider — asks again under the same remediation key. It must find the same
operation, and the platform must replace the node once. (AWS: the same against moto in
tests/unit/providers/test_aws_provider.py; at random points of the whole flow:
tests/e2e/test_controller_crash.py.)"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from remediator.errors import TransientError
from remediator.kube.client import KubeClient
from remediator.providers.base import NodePoolProvider, Operation, OperationState
from remediator.providers.clusterapi import GV, ClusterApiProvider
from remediator.providers.gce import GceProvider
from remediator.settings import GceProviderSettings
from tests.fixtures.sim import SimHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POOL = "h100-train"


def settled(provider: NodePoolProvider, op_id: str, timeout: float = 60.0) -> Operation:
    deadline = time.monotonic() + timeout
    while True:
        op = provider.get_operation(op_id)
        if op.finished:
            return op
        assert time.monotonic() < deadline, op
        time.sleep(0.2)


def machine_names(kube: KubeClient) -> set[str]:
    return {m["metadata"]["name"] for m in kube.list_custom(GV, "machines")}


def test_clusterapi_asked_again_after_a_crash_deletes_once_and_follows_the_same_machine(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(nodes=3, provision_delay=0.3, cloud="clusterapi")
    with (
        KubeClient.from_kubeconfig(sim.kubeconfig) as kube,
        KubeClient.from_kubeconfig(sim.kubeconfig) as restarted,
    ):
        before = machine_names(kube)
        # Requested (recorded and deleted), then the crash: a new process asks again.
        first = ClusterApiProvider(kube).request_replacement(POOL, "h100-train-0000", "k-1", "r")
        again = ClusterApiProvider(restarted).request_replacement(
            POOL, "h100-train-0000", "k-1", "r"
        )
        assert again.id == first.id
        done = settled(ClusterApiProvider(restarted), first.id)
        assert done.state is OperationState.SUCCEEDED, done
        after = machine_names(kube)
        assert before - after == {"h100-train-0000"} and after - before == {done.new_node}

        # Recorded on the Machine and its MachineSet, then the delete is lost (429) and the
        # process dies: the next one finds the record and deletes the Machine, once.
        fault = {
            "type": "error",
            "status": 429,
            "retry_after": 1,
            "verbs": ["delete"],
            "resources": ["machines"],
            "count": 1,
        }
        httpx.post(f"{sim.inject_url}/v1/kube-faults", json=fault, timeout=10).raise_for_status()
        with pytest.raises(TransientError):
            ClusterApiProvider(kube).request_replacement(POOL, "h100-train-0001", "k-2", "r")
        assert "h100-train-0001" in machine_names(kube)
        resumed = ClusterApiProvider(restarted).request_replacement(
            POOL, "h100-train-0001", "k-2", "r"
        )
        done = settled(ClusterApiProvider(restarted), resumed.id)
        assert done.state is OperationState.SUCCEEDED, done
        last = machine_names(kube)
        assert after - last == {"h100-train-0001"} and last - after == {done.new_node}


def test_gce_asked_again_after_a_crash_gets_the_same_operation_and_one_recreate(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(nodes=3, provision_delay=0.3, cloud="gce")
    settings = GceProviderSettings.model_validate(sim.provider)
    with KubeClient.from_kubeconfig(sim.kubeconfig) as kube:
        old_uid = kube.get_node("h100-train-0000").uid
        first = GceProvider.from_settings(settings, kube).request_replacement(
            POOL, "h100-train-0000", "k-1", "r"
        )
        # A new process asks again at once, and once more after the node was recreated (its
        # Node already gone and back): Compute Engine answers the requestId with the same
        # operation both times.
        restarted = GceProvider.from_settings(settings, kube)
        assert restarted.request_replacement(POOL, "h100-train-0000", "k-1", "r").id == first.id
        done = settled(restarted, first.id)
        assert done.state is OperationState.SUCCEEDED, done
        new_uid = kube.get_node("h100-train-0000").uid
        assert new_uid != old_uid
        late = GceProvider.from_settings(settings, kube)
        repeated = late.request_replacement(POOL, "h100-train-0000", "k-1", "r")
        assert repeated.id == first.id and repeated.state is OperationState.SUCCEEDED
        assert kube.get_node("h100-train-0000").uid == new_uid
