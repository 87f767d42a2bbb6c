"""The cloud answers' edges: what the AWS and GCE maintenance sources take, refuse and count."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from google.cloud import compute_v1
from pydantic import ValidationError

from remediator.kube.objects import Node
from remediator.signals.maintenance import MaintenanceStatus
from remediator.signals.sources.aws_maintenance import (
    MalformedAnswer,
    events_of,
    instance_nodes,
    read_page,
    status_of,
)
from remediator.signals.sources.gce_maintenance import event_of, zone_nodes

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def node(name: str, provider_id: str) -> Node:
    return Node(name=name, uid=name, resource_version="1", provider_id=provider_id)


def test_ended_ec2_events_are_told_by_their_description() -> None:
    assert status_of("[Completed] The instance is running on degraded hardware") is (
        MaintenanceStatus.COMPLETED
    )
    assert status_of("[Canceled] The system is scheduled for a reboot") is (
        MaintenanceStatus.CANCELLED
    )
    assert status_of("The system is scheduled for a reboot") is MaintenanceStatus.SCHEDULED


def test_instances_map_to_nodes_by_provider_id() -> None:
    nodes = [
        node("gpu-1", "aws:///us-east-1a/i-0abc"),
        node("gpu-2", "gce://p/z/gpu-2"),
        node("gpu-3", ""),
    ]
    assert instance_nodes(nodes) == {"i-0abc": "gpu-1"}
    assert zone_nodes(nodes, "p") == {("z", "gpu-2"): "gpu-2"}
    assert zone_nodes(nodes, "other-project") == {}


def test_ec2_events_on_other_instances_are_counted_and_bad_ones_refused() -> None:
    statuses = read_page(
        {
            "InstanceStatuses": [
                {
                    "InstanceId": "i-0abc",
                    "Events": [
                        {
                            "InstanceEventId": "instance-event-1",
                            "Code": "system-reboot",
                            "Description": "The system is scheduled for a reboot",
                            "NotBefore": T0,
                        },
                        {"InstanceEventId": "instance-event-2", "Code": "reboot-later"},
                    ],
                },
                {
                    "InstanceId": "i-0other",
                    "Events": [{"InstanceEventId": "instance-event-3", "Code": "instance-stop"}],
                },
            ]
        }
    )
    events, unknown, refused = events_of(statuses, {"i-0abc": "gpu-1"})
    assert [(e.event_id, e.node, e.code) for e in events] == [
        ("instance-event-1", "gpu-1", "system-reboot")
    ]
    assert unknown == ["instance-event-3"]
    assert [event_id for event_id, _ in refused] == ["instance-event-2"]
    assert "reboot-later" in refused[0][1] and "i-0abc" in refused[0][1]


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        ({}, "no InstanceStatuses"),
        ({"InstanceStatuses": [{"Events": []}]}, "InstanceStatuses.0.InstanceId"),
        ({"InstanceStatuses": "all fine"}, "InstanceStatuses"),
    ],
)
def test_a_malformed_ec2_answer_says_where(page: dict[str, object], problem: str) -> None:
    with pytest.raises(MalformedAnswer, match=problem):
        read_page(page)


def gce_instance(upcoming: dict[str, object] | None) -> compute_v1.Instance:
    body: dict[str, object] = {"id": "4000000001", "name": "gpu-2"}
    if upcoming is not None:
        body["resourceStatus"] = {"upcomingMaintenance": upcoming}
    return compute_v1.Instance.from_json(json.dumps(body))


def test_a_gce_announcement_is_an_event() -> None:
    event = event_of(
        gce_instance(
            {
                "type": "SCHEDULED",
                "canReschedule": True,
                "windowStartTime": "2026-03-02T00:00:00.000-08:00",
                "windowEndTime": "2026-03-02T04:00:00.000-08:00",
                "latestWindowStartTime": "2026-03-04T00:00:00.000-08:00",
                "maintenanceStatus": "PENDING",
            }
        ),
        "z",
        "gpu-2",
    )
    assert event is not None
    assert (event.event_id, event.instance_id, event.code) == (
        "gce-4000000001-maintenance",
        "4000000001",
        "SCHEDULED",
    )
    assert event.can_reschedule and event.deadline == datetime(2026, 3, 4, 8, tzinfo=UTC)
    assert event_of(gce_instance(None), "z", "gpu-2") is None


@pytest.mark.parametrize(
    "upcoming",
    [
        {"type": "WHENEVER", "windowStartTime": "2026-03-02T00:00:00Z"},
        {"type": "SCHEDULED", "windowStartTime": "tomorrow"},
        {
            "type": "SCHEDULED",
            "windowStartTime": "2026-03-02T04:00:00Z",
            "windowEndTime": "2026-03-02T00:00:00Z",
        },
    ],
)
def test_a_gce_announcement_that_cannot_be_read_is_refused(upcoming: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        event_of(gce_instance(upcoming), "z", "gpu-2")


def test_one_maintenance_source_per_cloud_account_of_the_providers() -> None:
    from remediator.settings import Settings
    from remediator.signals.sources.cloud_maintenance import maintenance_sources

    settings = Settings.model_validate(
        {
            "provider": {"type": "aws", "region": "us-east-1"},
            "pool_providers": {
                "a": {"type": "aws", "region": "us-east-1"},
                "b": {"type": "aws", "region": "us-west-2"},
                "c": {"type": "gce", "project": "p", "anonymous": True},
                "d": {"type": "http"},
            },
        }
    )

    class NoNodes:
        def list_nodes(self, label_selector: str | None = None) -> list[Node]:
            return []

    providers = [settings.provider, *settings.pool_providers.values()]
    names = [s.name for s in maintenance_sources(providers, NoNodes())]
    assert names == ["aws-maintenance", "aws-maintenance-2", "gce-maintenance"]
    assert maintenance_sources([Settings().provider], NoNodes()) == []
