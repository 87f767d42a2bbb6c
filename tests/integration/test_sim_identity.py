"""Hardware identity in the simulator (issue #28): a GCE instance recreated under the same name
keeps its providerID (`gce://PROJECT/ZONE/NAME`) but gets a new instance id, which GKE writes on
the Node as `container.googleapis.com/instance_id`; the ledger's machine id follows the id, so
the recreated node is new hardware. Real client library on the wire, `sim serve --cloud gce`."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.ledger.identity import GCE_INSTANCE_ID, machine_id
from remediator.providers.base import Operation
from remediator.providers.gce import GceProvider
from remediator.settings import GceProviderSettings
from tests.fixtures.sim import SimHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
POOL = "h100-train"
NODE = "h100-train-0000"


def settled(provider: GceProvider, op_id: str, timeout: float = 90.0) -> Operation:
    deadline = time.monotonic() + timeout
    while True:
        op = provider.get_operation(op_id)
        if op.finished:
            return op
        assert time.monotonic() < deadline, op
        time.sleep(0.2)


def machine_of(node: Node) -> str | None:
    return machine_id(node.provider_id, node.annotations)


def test_a_recreated_gce_instance_is_a_new_machine_under_the_same_name(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(nodes=2, provision_delay=0.3, cloud="gce")
    settings = GceProviderSettings.model_validate(sim.provider)
    with KubeClient.from_kubeconfig(sim.kubeconfig) as kube:
        before = kube.get_node(NODE)
        other = next(n for n in kube.list_nodes() if n.name != NODE)
        assert before.annotations[GCE_INSTANCE_ID].isdigit()
        assert machine_of(before) not in (None, machine_of(other))
        provider = GceProvider.from_settings(settings, kube)
        op = provider.request_replacement(POOL, NODE, "k-1", "r")
        assert settled(provider, op.id).finished
        after = kube.get_node(NODE)
        assert after.uid != before.uid and after.provider_id == before.provider_id
        assert machine_of(after) is not None and machine_of(after) != machine_of(before)
        assert machine_of(kube.get_node(other.name)) == machine_of(other)
