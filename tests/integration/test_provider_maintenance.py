"""Starting an announced maintenance through the real providers on their wire protocols against
the simulator: EC2 RebootInstances (boto3, moto behind the sim's AWS proxy) for the reboot
events and GCE instances.performMaintenance (google-cloud-compute) where canReschedule, once per
key; events no user-initiated call completes are refused with the reason and
reboot nothing; a provider without a maintenance verb says so through the pool selection."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from remediator.errors import PermanentError
from remediator.kube.client import KubeClient
from remediator.providers.base import MaintenanceUnsupported, trigger_maintenance
from remediator.providers.select import PoolProviders, build_provider
from remediator.settings import Settings
from tests.fixtures.sim import SimHandle
from tests.integration.test_provider_reboot import (
    POOL,
    boot_state,
    node_of,
    reboots_seen,
    wait_rebooted,
)

pytestmark = pytest.mark.integration


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


def test_aws_system_reboot_is_started_with_reboot_instances_once_per_key(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="aws", reboot_delay=1.0)
    kube = kube_of(sim)
    settings = Settings.model_validate({"provider": sim.provider})
    provider = PoolProviders(build_provider(settings.provider, kube), {})
    node = node_of(sim)
    before, _ = boot_state(sim, node)

    with pytest.raises(MaintenanceUnsupported, match="instance-retirement"):
        provider.trigger_maintenance(POOL, node, "instance-retirement", "rem-1-maint-0", "")
    assert boot_state(sim, node) == (before, "True")

    first = provider.trigger_maintenance(POOL, node, "system-reboot", "rem-1-maint-0", "planned")
    assert first.detail["call"] == "ec2:RebootInstances"
    assert first.detail["event"] == "system-reboot"
    after = wait_rebooted(sim, node, before)
    again = provider.trigger_maintenance(POOL, node, "system-reboot", "rem-1-maint-0", "planned")
    assert again.id == first.id
    assert boot_state(sim, node) == (after, "True")
    assert reboots_seen(sim, node) == 1


def test_a_provider_without_a_maintenance_verb_refuses_with_the_reason(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="clusterapi", reboot_delay=1.0)
    kube = kube_of(sim)
    settings = Settings.model_validate({"provider": sim.provider})
    provider = build_provider(settings.provider, kube)
    node = node_of(sim)
    with pytest.raises(MaintenanceUnsupported, match="ClusterApiProvider cannot trigger"):
        trigger_maintenance(provider, POOL, node, "system-reboot", "rem-2-maint-0", "")
    assert reboots_seen(sim, node) == 0


def announce(sim: SimHandle, node: str, can_reschedule: bool) -> None:
    start = datetime.now(UTC) + timedelta(days=1)
    body = {
        "instance": node,
        "window_start": start.isoformat(),
        "window_end": (start + timedelta(hours=4)).isoformat(),
        "can_reschedule": can_reschedule,
    }
    httpx.post(f"{sim.gce_url}/_sim/maintenance", json=body, timeout=10).raise_for_status()


def test_gce_maintenance_is_started_with_perform_maintenance_once_per_key(
    sim_factory: Callable[..., SimHandle], kube_of: Callable[[SimHandle], KubeClient]
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.5, cloud="gce", reboot_delay=1.0)
    kube = kube_of(sim)
    settings = Settings.model_validate({"provider": sim.provider})
    provider = PoolProviders(build_provider(settings.provider, kube), {})
    fixed, movable = node_of(sim, 0), node_of(sim, 1)

    announce(sim, fixed, can_reschedule=False)
    before_fixed, _ = boot_state(sim, fixed)
    with pytest.raises(PermanentError, match=r"performMaintenance .*cannot be triggered"):
        provider.trigger_maintenance(POOL, fixed, "SCHEDULED", "rem-3-maint-0", "")
    assert boot_state(sim, fixed) == (before_fixed, "True")

    announce(sim, movable, can_reschedule=True)
    before, _ = boot_state(sim, movable)
    first = provider.trigger_maintenance(POOL, movable, "SCHEDULED", "rem-4-maint-0", "planned")
    assert first.detail["call"] == "compute.instances.performMaintenance"
    assert first.detail["event"] == "SCHEDULED" and first.detail["instance"] == movable
    after = wait_rebooted(sim, movable, before)
    # The same key again: Compute Engine answers the first operation; nothing runs twice.
    again = provider.trigger_maintenance(POOL, movable, "SCHEDULED", "rem-4-maint-0", "planned")
    assert again.id == first.id
    assert boot_state(sim, movable) == (after, "True")
