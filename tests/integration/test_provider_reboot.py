"""Each real provider's reboot on its real wire protocol against the simulator: EC2
RebootInstances through boto3 and moto, GCE instances.reset through google-cloud-compute, and
Cluster API's reboot annotation on the Machine. One call reboots the node once (NotReady, back
with a new boot id); the same key again never reboots it a second time."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import httpx
import pytest

from remediator.errors import TransientError
from remediator.kube.client import KubeClient
from remediator.providers.base import NodePoolProvider, RebootUnsupported
from remediator.providers.select import build_provider
from remediator.settings import Settings
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

POOL = "h100-train"


@pytest.fixture
def kube_of() -> Iterator[Callable[[SimHandle], KubeClient]]:
    opened: list[KubeClient] = []

    def open_for(sim: SimHandle) -> KubeClient:
        client = KubeClient.from_kubeconfig(sim.kubeconfig)
        opened.append(client)
        return client

    yield open_for
    for client in opened:
        client.close()


def provider_of(sim: SimHandle, kube: KubeClient, **changes: Any) -> NodePoolProvider:
    settings = Settings.model_validate({"provider": {**sim.provider, **changes}})
    return build_provider(settings.provider, kube)


def node_of(sim: SimHandle, index: int = 0) -> str:
    names = sim.kubectl("get", "nodes", "-l", f"simcloud.io/nodepool={POOL}", "-o", "name")
    return names.split()[index].removeprefix("node/")


def boot_state(sim: SimHandle, node: str) -> tuple[str, str]:
    """(boot id, Ready status) as kubectl shows them."""
    got = json.loads(sim.kubectl("get", "node", node, "-o", "json"))
    ready = next(c["status"] for c in got["status"]["conditions"] if c["type"] == "Ready")
    return str(got["status"]["nodeInfo"]["bootID"]), str(ready)


def reboots_seen(sim: SimHandle, node: str) -> int:
    events = json.loads(sim.kubectl("get", "events", "-A", "-o", "json"))["items"]
    return sum(
        1
        for e in events
        if e.get("reason") == "Rebooted" and e["involvedObject"].get("name") == node
    )


def wait_rebooted(sim: SimHandle, node: str, before: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        boot_id, ready = boot_state(sim, node)
        if boot_id != before and ready == "True":
            return boot_id
        assert time.monotonic() < deadline, f"{node} not back with a new boot id: {ready}"
        time.sleep(0.1)


def reboot_once_per_key(sim: SimHandle, provider: NodePoolProvider, node: str) -> dict[str, str]:
    """The shared proof: one reboot, a new boot id, and the same key again reboots nothing."""
    before, _ = boot_state(sim, node)
    first = provider.reboot(POOL, node, "rem-1-reboot-0", "XID 79")
    assert first.node == node
    after = wait_rebooted(sim, node, before)
    again = provider.reboot(POOL, node, "rem-1-reboot-0", "XID 79")
    assert again.id == first.id
    assert boot_state(sim, node) == (after, "True")
    assert reboots_seen(sim, node) == 1
    return dict(first.detail)


def test_aws_reboots_the_instance_once_per_key(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="aws", reboot_delay=1.0)
    kube = kube_of(sim)
    node = node_of(sim)
    detail = reboot_once_per_key(sim, provider_of(sim, kube), node)
    instance = kube.get_node(node).provider_id.rsplit("/", 1)[-1]
    assert detail["instance"] == instance and detail["call"] == "ec2:RebootInstances"
    keys = sim.provider["test_credentials"]
    ec2 = boto3.client(
        "ec2",
        endpoint_url=sim.provider["endpoint_url"],
        region_name=sim.provider["region"],
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )
    described = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    assert described["State"]["Name"] == "running"
    tags = {t["Key"]: t["Value"] for t in described["Tags"]}
    assert tags["remediator.io/reboot-key"] == "rem-1-reboot-0"


def test_aws_reboot_refused_by_ec2_can_be_asked_again(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    """Throttled: nothing rebooted and no key left behind, so the retry reboots, once."""
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="aws", reboot_delay=1.0)
    kube = kube_of(sim)
    node = node_of(sim, 1)
    provider = provider_of(sim, kube, max_retries=0)
    fault = {"type": "throttle", "count": 1, "action": "RebootInstances"}
    httpx.post(f"{sim.aws_url}/_sim/faults", json=fault, timeout=10).raise_for_status()
    before, _ = boot_state(sim, node)
    with pytest.raises(TransientError, match="RequestLimitExceeded"):
        provider.reboot(POOL, node, "rem-2-reboot-0", "XID 79")
    assert boot_state(sim, node) == (before, "True")
    reboot_once_per_key(sim, provider, node)


def test_gce_resets_the_instance_once_per_key(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="gce", reboot_delay=1.0)
    kube = kube_of(sim)
    node = node_of(sim)
    detail = reboot_once_per_key(sim, provider_of(sim, kube), node)
    assert detail["instance"] == node and detail["operation"].startswith("operation-")
    assert detail["call"] == "compute.instances.reset"


def test_gce_reset_throttled_can_be_asked_again(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    """A 429 before Compute Engine took the request: nothing reset, the retry resets once."""
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="gce", reboot_delay=1.0)
    kube = kube_of(sim)
    node = node_of(sim, 1)
    provider = provider_of(sim, kube)
    fault = {"type": "throttle", "count": 1}
    httpx.post(f"{sim.gce_url}/_sim/faults", json=fault, timeout=10).raise_for_status()
    before, _ = boot_state(sim, node)
    with pytest.raises(TransientError, match="429"):
        provider.reboot(POOL, node, "rem-1-reboot-0", "XID 79")
    assert boot_state(sim, node) == (before, "True")
    reboot_once_per_key(sim, provider, node)


def test_clusterapi_reboots_through_the_machine_annotation_once_per_key(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="clusterapi", reboot_delay=1.0)
    kube = kube_of(sim)
    node = node_of(sim)
    with pytest.raises(RebootUnsupported):
        provider_of(sim, kube, reboot_annotation=None).reboot(POOL, node, "rem-3-reboot-0", "")
    provider = provider_of(sim, kube)
    detail = reboot_once_per_key(sim, provider, node)
    assert detail["annotation"] == "reboot.sim.x-k8s.io"
    machine = json.loads(sim.kubectl("get", "machines", detail["machine"], "-o", "json"))
    annotations = machine["metadata"]["annotations"]
    assert "reboot.sim.x-k8s.io" not in annotations  # the infrastructure provider took it
    assert annotations["remediator.io/reboot-key"] == "rem-1-reboot-0"
