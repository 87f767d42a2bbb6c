"""The Auto Scaling groups' scaling activities, which moto does not keep (its
DescribeScalingActivities answers an empty list): the simulated fleet records each launch it sees
— successful, or failed for want of capacity — and the fault proxy serves them on the wire in
AWS's shape (newest first, `StatusCode` Successful/Failed, `StatusMessage` on failure)."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from xml.sax.saxutils import escape

NS = "https://autoscaling.amazonaws.com/doc/2011-01-01/"


def capacity_message(instance_type: str, zone: str, other_zones: list[str]) -> str:
    """What AWS says when a group's RunInstances finds no capacity in the zone."""
    return (
        f"Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do "
        f"not have sufficient {instance_type} capacity in the Availability Zone you requested "
        f"({zone}). Our system will be working on provisioning additional capacity. You can "
        f"currently get {instance_type} capacity by not specifying an Availability Zone in your "
        f"request or choosing {', '.join(other_zones)}. Launching EC2 instance failed."
    )


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class Activity:
    group: str
    description: str
    cause: str
    started: datetime
    status: str  # Successful | Failed
    zone: str
    message: str | None = None
    activity_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def xml(self) -> str:
        fields = [
            ("ActivityId", self.activity_id),
            ("AutoScalingGroupName", self.group),
            ("Description", self.description),
            ("Cause", self.cause),
            ("StartTime", _iso(self.started)),
            ("EndTime", _iso(self.started)),
            ("StatusCode", self.status),
            *([("StatusMessage", self.message)] if self.message else []),
            ("Progress", "100"),
            ("Details", f'{{"Availability Zone":"{self.zone}"}}'),
        ]
        return "<member>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in fields) + "</member>"


def _capacity_cause(started: datetime, before: int) -> str:
    return (
        f"At {_iso(started)} an instance was started in response to a difference between "
        f"desired and actual capacity, increasing the capacity from {before} to {before + 1}."
    )


def launched(group: str, instance: str, zone: str, started: datetime, before: int) -> Activity:
    return Activity(
        group=group,
        description=f"Launching a new EC2 instance: {instance}",
        cause=_capacity_cause(started, before),
        started=started,
        status="Successful",
        zone=zone,
    )


def failed_launch(group: str, zone: str, started: datetime, before: int, message: str) -> Activity:
    return Activity(
        group=group,
        description=f"Launching a new EC2 instance.  Status Reason: {message}",
        cause=_capacity_cause(started, before),
        started=started,
        status="Failed",
        zone=zone,
        message=message,
    )


@dataclass
class ActivityLog:
    _by_group: dict[str, list[Activity]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, activity: Activity) -> None:
        with self._lock:
            self._by_group.setdefault(activity.group, []).append(activity)

    def of(self, group: str | None) -> list[Activity]:
        """Newest first, as AWS lists them; every group's when none is named."""
        with self._lock:
            found = [a for g, acts in self._by_group.items() if group in (None, g) for a in acts]
        return sorted(found, key=lambda a: a.started, reverse=True)


def describe_response(activities: list[Activity]) -> str:
    members = "".join(a.xml() for a in activities)
    return (
        f'<DescribeScalingActivitiesResponse xmlns="{NS}"><DescribeScalingActivitiesResult>'
        f"<Activities>{members}</Activities></DescribeScalingActivitiesResult>"
        f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        "</DescribeScalingActivitiesResponse>"
    )
