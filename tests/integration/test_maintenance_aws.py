"""EC2 scheduled events end to end on the wire: the simulator's AWS proxy (moto behind it, which
keeps no events) answers `DescribeInstanceStatus` with them in EC2's shape and pages it; the
source reads it through boto3's paginator and maps instances to Nodes by providerID. Each event
appears once per poll, is updated when rescheduled, and ends once when completed or cancelled."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from remediator.kube.client import KubeClient
from remediator.settings import AwsProviderSettings
from remediator.signals.maintenance import MaintenanceEvent
from remediator.signals.model import Signal
from remediator.signals.sources.aws_maintenance import AwsMaintenanceSource
from tests.fixtures.sim import SimHandle, start_sim

pytestmark = pytest.mark.integration

T0 = datetime.now(UTC).replace(microsecond=0)
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def aws_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    sim = start_sim(tmp_path_factory.mktemp("aws-maint"), 6, 2, 0.5, cloud="aws")
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def kube(aws_sim: SimHandle) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(aws_sim.kubeconfig)
    yield client
    client.close()


def ec2_client(sim: SimHandle) -> Any:
    keys = sim.provider["test_credentials"]
    return boto3.client(
        "ec2",
        endpoint_url=sim.provider["endpoint_url"],
        region_name=sim.provider["region"],
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )


def source_of(sim: SimHandle, kube: KubeClient, **changes: Any) -> AwsMaintenanceSource:
    settings = AwsProviderSettings.model_validate({**sim.provider, **changes})
    return AwsMaintenanceSource.from_settings(settings, kube, page_size=5)  # 6 instances: 2 pages


def inject(sim: SimHandle, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = httpx.post(f"{sim.aws_url}/_sim/events{path}", json=body or {}, timeout=10)
    response.raise_for_status()
    found: dict[str, Any] = response.json()
    return found


def nodes(sim: SimHandle) -> list[str]:
    return [n.removeprefix("node/") for n in sim.kubectl("get", "nodes", "-o", "name").split()]


def of_event(signals: tuple[Signal, ...], event_id: str) -> list[MaintenanceEvent]:
    events = [MaintenanceEvent.of(s) for s in signals]
    return [e for e in events if e.event_id == event_id]


def test_describe_instance_status_carries_events_in_ec2_shape_and_pages(
    aws_sim: SimHandle, kube: KubeClient
) -> None:
    node = nodes(aws_sim)[0]
    created = inject(
        aws_sim,
        "",
        {
            "node": node,
            "code": "system-reboot",
            "not_before": (T0 + DAY).isoformat(),
            "not_after": (T0 + DAY + timedelta(hours=2)).isoformat(),
            "not_before_deadline": (T0 + 7 * DAY).isoformat(),
        },
    )
    ec2 = ec2_client(aws_sim)
    pages = list(
        ec2.get_paginator("describe_instance_status").paginate(
            IncludeAllInstances=True, PaginationConfig={"PageSize": 5}
        )
    )
    assert [len(p["InstanceStatuses"]) for p in pages] == [5, 1]
    statuses = [s for p in pages for s in p["InstanceStatuses"]]
    assert len({s["InstanceId"] for s in statuses}) == 6
    (status,) = [s for s in statuses if s["InstanceId"] == created["instance_id"]]
    (event,) = status["Events"]
    assert event["InstanceEventId"] == created["instanceEventId"]
    assert event["InstanceEventId"].startswith("instance-event-")
    assert event["Code"] == "system-reboot"
    assert event["Description"] == "The system is scheduled for a reboot"
    assert event["NotBefore"] == T0 + DAY
    assert event["NotAfter"] == T0 + DAY + timedelta(hours=2)
    assert event["NotBeforeDeadline"] == T0 + 7 * DAY
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        ec2.describe_instance_status(MaxResults=2)
    with pytest.raises(ClientError, match="InvalidNextToken"):
        ec2.describe_instance_status(MaxResults=5, NextToken="not-a-token")
    inject(aws_sim, f"/{created['instanceEventId']}/cancel")


def test_an_event_appears_once_is_rescheduled_and_ends_when_completed(
    aws_sim: SimHandle, kube: KubeClient
) -> None:
    node = nodes(aws_sim)[1]
    source = source_of(aws_sim, kube)
    created = inject(
        aws_sim,
        "",
        {
            "node": node,
            "code": "instance-retirement",
            "not_before": (T0 + 2 * DAY).isoformat(),
            "not_before_deadline": (T0 + 9 * DAY).isoformat(),
        },
    )
    event_id = created["instanceEventId"]
    first = source.poll(T0)
    assert first.health.up, first.health.error
    assert first.health.detail["pages"] == "2"
    (event,) = of_event(first.signals, event_id)
    assert (event.node, event.code) == (node, "instance-retirement")
    assert event.status.value == "scheduled"
    assert event.instance_id == created["instance_id"]
    assert event.window_start == T0 + 2 * DAY and event.deadline == T0 + 9 * DAY
    (again,) = of_event(source.poll(T0 + timedelta(minutes=1)).signals, event_id)
    assert again.status.value == "scheduled"

    inject(aws_sim, f"/{event_id}/reschedule", {"not_before": (T0 + 3 * DAY).isoformat()})
    (moved,) = of_event(source.poll(T0 + timedelta(minutes=2)).signals, event_id)
    assert moved.status.value == "rescheduled" and moved.window_start == T0 + 3 * DAY

    completed = inject(aws_sim, f"/{event_id}/complete")
    assert completed["description"].startswith("[Completed] ")
    (ended,) = of_event(source.poll(T0 + timedelta(minutes=3)).signals, event_id)
    assert ended.status.value == "completed"
    # EC2 goes on describing it for a week; it is not news again.
    assert of_event(source.poll(T0 + timedelta(minutes=4)).signals, event_id) == []


def test_a_cancelled_event_ends_and_one_past_its_deadline_is_overdue(
    aws_sim: SimHandle, kube: KubeClient
) -> None:
    node = nodes(aws_sim)[2]
    source = source_of(aws_sim, kube)
    late = inject(
        aws_sim,
        "",
        {
            "node": node,
            "code": "system-maintenance",
            "not_before": (T0 - DAY).isoformat(),
            "not_before_deadline": (T0 - timedelta(hours=1)).isoformat(),
        },
    )
    polled = source.poll(T0)
    (signal,) = [s for s in polled.signals if s.labels["event_id"] == late["instanceEventId"]]
    assert signal.labels["overdue"] == "true"
    inject(aws_sim, f"/{late['instanceEventId']}/cancel")
    (ended,) = of_event(source.poll(T0 + timedelta(minutes=1)).signals, late["instanceEventId"])
    assert ended.status.value == "cancelled"


def test_an_event_on_an_instance_not_in_the_cluster_is_counted_once_and_ignored(
    aws_sim: SimHandle, kube: KubeClient
) -> None:
    source = source_of(aws_sim, kube)
    # An instance of the account that is no Node of this cluster (another team's, a bastion).
    ec2 = ec2_client(aws_sim)
    outsider = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)
    stray = inject(
        aws_sim,
        "",
        {
            "instance_id": outsider["Instances"][0]["InstanceId"],
            "code": "instance-stop",
            "not_before": (T0 + DAY).isoformat(),
        },
    )
    first = source.poll(T0)
    assert first.health.up
    assert first.health.detail["unknown_instances"] == "1"
    assert of_event(first.signals, stray["instanceEventId"]) == []
    assert source.poll(T0 + timedelta(minutes=1)).health.detail["unknown_instances"] == "0"


def test_a_refused_answer_makes_the_source_down_and_ends_nothing(
    aws_sim: SimHandle, kube: KubeClient
) -> None:
    node = nodes(aws_sim)[3]
    source = source_of(aws_sim, kube, max_retries=0)
    created = inject(
        aws_sim,
        "",
        {"node": node, "code": "instance-reboot", "not_before": (T0 + DAY).isoformat()},
    )
    assert of_event(source.poll(T0).signals, created["instanceEventId"])
    fault = {"type": "throttle", "count": 1, "action": "DescribeInstanceStatus"}
    httpx.post(f"{aws_sim.aws_url}/_sim/faults", json=fault, timeout=10).raise_for_status()
    down = source.poll(T0 + timedelta(minutes=1))
    assert not down.health.up and down.signals == ()
    assert "RequestLimitExceeded" in (down.health.error or "")
    (still,) = of_event(source.poll(T0 + timedelta(minutes=2)).signals, created["instanceEventId"])
    assert still.status.value == "scheduled"
    inject(aws_sim, f"/{created['instanceEventId']}/cancel")


def test_the_inject_api_refuses_what_ec2_would(aws_sim: SimHandle) -> None:
    node = nodes(aws_sim)[4]
    created = inject(
        aws_sim,
        "",
        {
            "node": node,
            "code": "system-reboot",
            "not_before": (T0 + DAY).isoformat(),
            "not_before_deadline": (T0 + 2 * DAY).isoformat(),
        },
    )
    late = {"not_before": (T0 + 3 * DAY).isoformat()}
    moved = httpx.post(
        f"{aws_sim.aws_url}/_sim/events/{created['instanceEventId']}/reschedule",
        json=late,
        timeout=10,
    )
    assert moved.status_code == 400 and "deadline" in moved.json()["error"]
    bad = httpx.post(
        f"{aws_sim.aws_url}/_sim/events",
        json={"node": node, "code": "reboot-please", "not_before": T0.isoformat()},
        timeout=10,
    )
    assert bad.status_code == 400
    inject(aws_sim, f"/{created['instanceEventId']}/complete")
    twice = httpx.post(
        f"{aws_sim.aws_url}/_sim/events/{created['instanceEventId']}/complete", timeout=10
    )
    assert twice.status_code == 400 and twice.json()["code"] == "IncorrectState"
