"""EC2 scheduled events → `maintenance` signals (signals/maintenance.py).

One `DescribeInstanceStatus` per poll with `IncludeAllInstances` (a stopped instance's events
count too), paged through boto3's paginator, whatever the fleet size: never a call per node.
Instances are matched to Nodes by `spec.providerID` (`aws:///ZONE/i-…`). An event whose
description starts `[Completed]` or `[Canceled]` has ended (EC2 keeps describing it for about a
week); one no longer described at all has ended too.

Bad input: an event on an instance that is no Node of this cluster is counted
(`unknown_instances`, once per event) and ignored; one EC2 describes in a shape we cannot read
(an unknown code, a window that ends before it starts) is refused with the reason and leaves an
event already open as it was; a failed or malformed answer makes the source down with the
reason, and ends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from remediator.errors import PermanentError, RemediatorError, validation_message
from remediator.kube.objects import Node
from remediator.providers.aws import parse_provider_id, wrap_client_error
from remediator.settings import AwsProviderSettings
from remediator.signals.maintenance import (
    MaintenanceBook,
    MaintenanceEvent,
    MaintenanceOrigin,
    MaintenanceStatus,
    NewIds,
)
from remediator.signals.sources.base import HealthTracker, SourceResult

ENDED_PREFIXES = (
    ("[Completed]", MaintenanceStatus.COMPLETED),
    ("[Canceled]", MaintenanceStatus.CANCELLED),
    ("[Cancelled]", MaintenanceStatus.CANCELLED),
)


class NodeLister(Protocol):
    def list_nodes(self, label_selector: str | None = None) -> list[Node]: ...


class Ec2Event(BaseModel):
    """`InstanceStatusEvent` as boto3 parses it; fields we do not use are let through."""

    model_config = ConfigDict(extra="ignore")

    InstanceEventId: str = Field(min_length=1)
    Code: str
    Description: str = ""
    NotBefore: AwareDatetime | None = None
    NotAfter: AwareDatetime | None = None
    NotBeforeDeadline: AwareDatetime | None = None


class Ec2Status(BaseModel):
    model_config = ConfigDict(extra="ignore")

    InstanceId: str = Field(min_length=1)
    Events: list[dict[str, Any]] = Field(default_factory=list)


STATUSES: TypeAdapter[list[Ec2Status]] = TypeAdapter(list[Ec2Status])


class MalformedAnswer(Exception):
    """EC2 answered in a shape we cannot read; the message says where."""


def status_of(description: str) -> MaintenanceStatus:
    for prefix, status in ENDED_PREFIXES:
        if description.startswith(prefix):
            return status
    return MaintenanceStatus.SCHEDULED


def instance_nodes(nodes: Iterable[Node]) -> dict[str, str]:
    """EC2 instance id → Node name, for the Nodes whose providerID names one."""
    found: dict[str, str] = {}
    for node in nodes:
        try:
            _, instance = parse_provider_id(node.provider_id)
        except PermanentError:
            continue
        found[instance] = node.name
    return found


def read_page(page: Mapping[str, Any]) -> list[Ec2Status]:
    raw = page.get("InstanceStatuses")
    if raw is None:
        raise MalformedAnswer("no InstanceStatuses in the answer")
    try:
        return STATUSES.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise MalformedAnswer(f"InstanceStatuses.{where}: {first['msg']}") from exc


def events_of(
    statuses: Iterable[Ec2Status], nodes: Mapping[str, str]
) -> tuple[list[MaintenanceEvent], list[str], list[tuple[str, str]]]:
    """Pure: the statuses' events on this cluster's instances; the ids of events on other
    instances; and (event id, reason) for each event refused."""
    events: list[MaintenanceEvent] = []
    unknown: list[str] = []
    refused: list[tuple[str, str]] = []
    for status in statuses:
        for raw in status.Events:
            event_id = str(raw.get("InstanceEventId") or "")
            node = nodes.get(status.InstanceId)
            if node is None:
                unknown.append(event_id or status.InstanceId)
                continue
            try:
                ec2 = Ec2Event.model_validate(raw)
                events.append(
                    MaintenanceEvent(
                        event_id=ec2.InstanceEventId,
                        code=ec2.Code,
                        origin=MaintenanceOrigin.AWS,
                        instance_id=status.InstanceId,
                        node=node,
                        status=status_of(ec2.Description),
                        window_start=ec2.NotBefore,
                        window_end=ec2.NotAfter,
                        deadline=ec2.NotBeforeDeadline,
                        description=ec2.Description[:512],
                    )
                )
            except ValidationError as exc:
                why = validation_message(exc, "event")
                refused.append((event_id, f"{status.InstanceId} event {event_id}: {why}"))
    return events, unknown, refused


class AwsMaintenanceSource:
    """`ec2` is a boto3 EC2 client (its timeouts and retries bound a poll)."""

    def __init__(
        self, ec2: Any, nodes: NodeLister, name: str = "aws-maintenance", page_size: int = 1000
    ) -> None:
        self.name = name
        self._ec2 = ec2
        self._nodes = nodes
        self._page_size = page_size
        self._health = HealthTracker(name)
        self._book = MaintenanceBook(name)
        self._unknown = NewIds()

    @classmethod
    def from_settings(
        cls,
        settings: AwsProviderSettings,
        nodes: NodeLister,
        page_size: int = 1000,
        name: str = "aws-maintenance",
    ) -> AwsMaintenanceSource:
        """The EC2 client the provider's settings describe (region, endpoint, timeouts)."""
        config = Config(
            region_name=settings.region,
            connect_timeout=min(settings.timeout_seconds, 5.0),
            read_timeout=settings.timeout_seconds,
            retries={"total_max_attempts": settings.max_retries + 1, "mode": "standard"},
        )
        keys = settings.test_credentials
        session = boto3.session.Session(
            aws_access_key_id=keys.access_key_id if keys else None,
            aws_secret_access_key=keys.secret_access_key.get_secret_value() if keys else None,
        )
        ec2 = session.client("ec2", endpoint_url=settings.endpoint_url, config=config)
        return cls(ec2, nodes, name=name, page_size=page_size)

    def _pages(self) -> Iterator[Mapping[str, Any]]:
        paginator = self._ec2.get_paginator("describe_instance_status")
        yield from paginator.paginate(
            IncludeAllInstances=True, PaginationConfig={"PageSize": self._page_size}
        )

    def poll(self, now: datetime) -> SourceResult:
        try:
            nodes = instance_nodes(self._nodes.list_nodes())
        except RemediatorError as exc:
            return self._health.down(now, f"Kubernetes API: cannot list nodes: {exc}")
        statuses: list[Ec2Status] = []
        pages = 0
        try:
            for page in self._pages():
                pages += 1
                statuses.extend(read_page(page))
        except (ClientError, BotoCoreError) as exc:
            return self._health.down(now, str(wrap_client_error(exc, "DescribeInstanceStatus")))
        except MalformedAnswer as exc:
            return self._health.down(now, f"EC2 DescribeInstanceStatus: malformed answer: {exc}")
        events, unknown, refused = events_of(statuses, nodes)
        signals = self._book.update(events, now, unsure={event_id for event_id, _ in refused})
        detail = {
            "instances": str(len(statuses)),
            "pages": str(pages),
            "open_events": str(len(self._book)),
            "unknown_instances": str(self._unknown.count(unknown)),
        }
        if refused:
            detail |= {"refused": str(len(refused)), "refused_example": refused[0][1][:300]}
        return self._health.ok(now, tuple(signals), detail)
