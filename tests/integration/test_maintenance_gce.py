"""Compute Engine host maintenance on the wire: the simulated Compute API serves
`resourceStatus.upcomingMaintenance` on instances (instances.get, instances.list, paged) and
`instances.performMaintenance`; the source reads it through google-cloud-compute. Each
announcement appears once per poll, is updated when rescheduled, and ends when the maintenance
ran or was withdrawn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from remediator.kube.client import KubeClient
from remediator.settings import GceProviderSettings
from remediator.signals.maintenance import MaintenanceEvent
from remediator.signals.model import Signal
from remediator.signals.sources.gce_maintenance import GceMaintenanceSource
from tests.fixtures.sim import SimHandle, start_sim

pytestmark = pytest.mark.integration

T0 = datetime.now(UTC).replace(microsecond=0)
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def gce_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    sim = start_sim(tmp_path_factory.mktemp("gce-maint"), 6, 2, 0.5, cloud="gce", reboot_delay=1.0)
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def kube(gce_sim: SimHandle) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(gce_sim.kubeconfig)
    yield client
    client.close()


def instances_client(sim: SimHandle) -> compute_v1.InstancesClient:
    return compute_v1.InstancesClient(
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=sim.provider["api_endpoint"]),
        transport="rest",
    )


def source_of(sim: SimHandle, kube: KubeClient) -> GceMaintenanceSource:
    settings = GceProviderSettings.model_validate(sim.provider)
    return GceMaintenanceSource.from_settings(settings, kube, page_size=4)  # 6 VMs: 2 pages


def nodes(sim: SimHandle) -> list[str]:
    return [n.removeprefix("node/") for n in sim.kubectl("get", "nodes", "-o", "name").split()]


def announce(sim: SimHandle, instance: str, start: datetime, **more: Any) -> None:
    body = {
        "instance": instance,
        "window_start": start.isoformat(),
        "window_end": (start + timedelta(hours=4)).isoformat(),
        "latest_window_start": (start + 2 * DAY).isoformat(),
        **more,
    }
    httpx.post(f"{sim.gce_url}/_sim/maintenance", json=body, timeout=10).raise_for_status()


def on(signals: tuple[Signal, ...], node: str) -> list[MaintenanceEvent]:
    return [MaintenanceEvent.of(s) for s in signals if s.node == node]


def boot_id(sim: SimHandle, node: str) -> str:
    return sim.kubectl("get", "node", node, "-o", "jsonpath={.status.nodeInfo.bootID}")


def test_instances_carry_upcoming_maintenance_in_compute_v1_shape(gce_sim: SimHandle) -> None:
    node = nodes(gce_sim)[0]
    announce(gce_sim, node, T0 + DAY, can_reschedule=True)
    client = instances_client(gce_sim)
    zone, project = "sim-central1-a", gce_sim.provider["project"]
    got = client.get(project=project, zone=zone, instance=node)
    upcoming = got.resource_status.upcoming_maintenance
    assert upcoming.type_ == "SCHEDULED"
    assert upcoming.can_reschedule is True
    assert upcoming.maintenance_status == "PENDING"
    assert datetime.fromisoformat(upcoming.window_start_time) == T0 + DAY
    assert datetime.fromisoformat(upcoming.window_end_time) == T0 + DAY + timedelta(hours=4)
    assert datetime.fromisoformat(upcoming.latest_window_start_time) == T0 + 3 * DAY
    request = compute_v1.ListInstancesRequest(project=project, zone=zone, max_results=4)
    pages = list(client.list(request=request).pages)
    assert [len(p.items) for p in pages] == [4, 2]
    other = client.get(project=project, zone=zone, instance=nodes(gce_sim)[1])
    assert "upcoming_maintenance" not in other.resource_status
    httpx.post(f"{gce_sim.gce_url}/_sim/maintenance/{node}/cancel", timeout=10).raise_for_status()


def test_an_announcement_appears_once_is_rescheduled_and_ends_when_withdrawn(
    gce_sim: SimHandle, kube: KubeClient
) -> None:
    node = nodes(gce_sim)[2]
    source = source_of(gce_sim, kube)
    announce(gce_sim, node, T0 + DAY, type="UNSCHEDULED", can_reschedule=False)
    first = source.poll(T0)
    assert first.health.up, first.health.error
    assert first.health.detail["pages"] == "2"
    (event,) = on(first.signals, node)
    assert (event.code, event.status.value, event.can_reschedule) == (
        "UNSCHEDULED",
        "scheduled",
        False,
    )
    assert event.window_start == T0 + DAY and event.deadline == T0 + 3 * DAY
    (again,) = on(source.poll(T0 + timedelta(minutes=1)).signals, node)
    assert again.event_id == event.event_id and again.status.value == "scheduled"
    announce(gce_sim, node, T0 + 2 * DAY, type="UNSCHEDULED", can_reschedule=False)
    (moved,) = on(source.poll(T0 + timedelta(minutes=2)).signals, node)
    assert moved.status.value == "rescheduled" and moved.window_start == T0 + 2 * DAY
    httpx.post(f"{gce_sim.gce_url}/_sim/maintenance/{node}/cancel", timeout=10).raise_for_status()
    (ended,) = on(source.poll(T0 + timedelta(minutes=3)).signals, node)
    assert ended.status.value == "completed"
    assert on(source.poll(T0 + timedelta(minutes=4)).signals, node) == []


def test_perform_maintenance_reboots_the_node_and_the_announcement_clears(
    gce_sim: SimHandle, kube: KubeClient
) -> None:
    node = nodes(gce_sim)[3]
    source = source_of(gce_sim, kube)
    client = instances_client(gce_sim)
    project, zone = gce_sim.provider["project"], "sim-central1-a"
    with pytest.raises(gexc.BadRequest, match="no upcoming maintenance"):
        client.perform_maintenance(project=project, zone=zone, instance=node)
    announce(gce_sim, node, T0 + DAY, can_reschedule=True)
    (event,) = on(source.poll(T0).signals, node)
    assert event.can_reschedule
    before = boot_id(gce_sim, node)
    op = client.perform_maintenance_unary(project=project, zone=zone, instance=node)
    assert op.operation_type == "performMaintenance" and op.name.startswith("operation-")
    ops = compute_v1.ZoneOperationsClient(
        credentials=AnonymousCredentials(),
        client_options=ClientOptions(api_endpoint=gce_sim.provider["api_endpoint"]),
        transport="rest",
    )
    assert ops.get(project=project, zone=zone, operation=op.name).status.name == "DONE"
    deadline = time.monotonic() + 60  # the reboot takes reboot_delay; generous under load
    while boot_id(gce_sim, node) in ("", before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert boot_id(gce_sim, node) not in ("", before)
    got = client.get(project=project, zone=zone, instance=node)
    assert "upcoming_maintenance" not in got.resource_status
    (ended,) = on(source.poll(T0 + timedelta(minutes=1)).signals, node)
    assert ended.status.value == "completed"


def test_a_maintenance_that_cannot_be_triggered_is_refused(gce_sim: SimHandle) -> None:
    node = nodes(gce_sim)[4]
    announce(gce_sim, node, T0 + DAY, can_reschedule=False)
    client = instances_client(gce_sim)
    with pytest.raises(gexc.BadRequest, match="cannot be triggered"):
        client.perform_maintenance(
            project=gce_sim.provider["project"], zone="sim-central1-a", instance=node
        )
    httpx.post(f"{gce_sim.gce_url}/_sim/maintenance/{node}/cancel", timeout=10).raise_for_status()


def test_a_failed_list_makes_the_source_down_and_ends_nothing(
    gce_sim: SimHandle, kube: KubeClient
) -> None:
    node = nodes(gce_sim)[5]
    source = source_of(gce_sim, kube)
    announce(gce_sim, node, T0 - DAY, latest_window_start=(T0 - timedelta(hours=1)).isoformat())
    (first,) = [s for s in source.poll(T0).signals if s.node == node]
    assert first.labels["overdue"] == "true"
    fault = {"type": "throttle_instances", "count": 1}
    httpx.post(f"{gce_sim.gce_url}/_sim/faults", json=fault, timeout=10).raise_for_status()
    down = source.poll(T0 + timedelta(minutes=1))
    assert not down.health.up and down.signals == ()
    assert "429" in (down.health.error or "")
    (still,) = on(source.poll(T0 + timedelta(minutes=2)).signals, node)
    assert still.status.value == "scheduled"
    httpx.post(f"{gce_sim.gce_url}/_sim/maintenance/{node}/cancel", timeout=10).raise_for_status()
