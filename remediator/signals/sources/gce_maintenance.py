"""Compute Engine's announced host maintenance → `maintenance` signals (signals/maintenance.py).

Per poll, one paged `instances.list` per zone that holds Nodes of this cluster (the zones come
from their providerIDs, `gce://PROJECT/ZONE/NAME`), through google-cloud-compute, never a call
per node. In compute v1 an instance's announcement is `resourceStatus.upcomingMaintenance`:
`type`, `canReschedule`, `windowStartTime`/`windowEndTime`, `latestWindowStartTime` (the
deadline: the window starts no later) and `maintenanceStatus` (PENDING, ONGOING). Compute Engine
gives the announcement no id of its own: the event is the instance's (its numeric id, so a
recreated VM of the same name is another event), rescheduled when its window moves, and ended
once the announcement is gone (the maintenance ran, or was withdrawn: the API does not say
which; it reads `completed`).

Bad input as in aws_maintenance.py: announcements on instances that are no Node here are counted
once and ignored; one that cannot be read is refused with the reason and ends nothing; a failed
call makes the source down and ends nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Protocol

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1
from pydantic import ValidationError

from remediator.errors import PermanentError, RemediatorError, validation_message
from remediator.kube.objects import Node
from remediator.providers.gce import parse_provider_id, wrap
from remediator.settings import GceProviderSettings
from remediator.signals.maintenance import (
    MaintenanceBook,
    MaintenanceEvent,
    MaintenanceOrigin,
    NewIds,
)
from remediator.signals.sources.base import HealthTracker, SourceResult

MAX_RESULTS = 500  # instances.list's own bound


class NodeLister(Protocol):
    def list_nodes(self, label_selector: str | None = None) -> list[Node]: ...


def zone_nodes(nodes: Iterable[Node], project: str) -> dict[tuple[str, str], str]:
    """(zone, instance name) → Node name, for this project's Nodes."""
    found: dict[tuple[str, str], str] = {}
    for node in nodes:
        try:
            owner, zone, name = parse_provider_id(node.provider_id)
        except PermanentError:
            continue
        if owner == project:
            found[(zone, name)] = node.name
    return found


def event_of(instance: Any, zone: str, node: str) -> MaintenanceEvent | None:
    """The instance's announcement as an event; None when it has none. ValidationError when it
    cannot be read (an unknown type, a time that is not RFC 3339, a window ending first)."""
    if "resource_status" not in instance:
        return None
    status = instance.resource_status
    if "upcoming_maintenance" not in status:
        return None
    upcoming = status.upcoming_maintenance
    return MaintenanceEvent.model_validate(
        {
            "event_id": f"gce-{instance.id}-maintenance",
            "code": upcoming.type_ or "UNDEFINED_TYPE",
            "origin": MaintenanceOrigin.GCE,
            "instance_id": str(instance.id),
            "node": node,
            "window_start": upcoming.window_start_time or None,
            "window_end": upcoming.window_end_time or None,
            "deadline": upcoming.latest_window_start_time or None,
            "can_reschedule": upcoming.can_reschedule,
            "description": f"{zone}/{instance.name}: maintenance "
            f"{upcoming.maintenance_status or 'UNKNOWN'}",
        }
    )


class GceMaintenanceSource:
    """`instances` is a compute_v1.InstancesClient."""

    def __init__(
        self,
        instances: Any,
        project: str,
        nodes: NodeLister,
        name: str = "gce-maintenance",
        page_size: int = MAX_RESULTS,
    ) -> None:
        self.name = name
        self._instances = instances
        self._project = project
        self._nodes = nodes
        self._page_size = page_size
        self._health = HealthTracker(name)
        self._book = MaintenanceBook(name)
        self._unknown = NewIds()

    @classmethod
    def from_settings(
        cls,
        settings: GceProviderSettings,
        nodes: NodeLister,
        page_size: int = MAX_RESULTS,
        name: str = "gce-maintenance",
    ) -> GceMaintenanceSource:
        options = (
            ClientOptions(api_endpoint=settings.api_endpoint) if settings.api_endpoint else None
        )
        credentials = AnonymousCredentials() if settings.anonymous else None
        client = compute_v1.InstancesClient(
            credentials=credentials, client_options=options, transport="rest"
        )
        return cls(client, settings.project, nodes, name=name, page_size=page_size)

    def poll(self, now: datetime) -> SourceResult:
        try:
            nodes = zone_nodes(self._nodes.list_nodes(), self._project)
        except RemediatorError as exc:
            return self._health.down(now, f"Kubernetes API: cannot list nodes: {exc}")
        events: list[MaintenanceEvent] = []
        unknown: list[str] = []
        refused: list[tuple[str, str]] = []
        listed = pages = 0
        zones = sorted({zone for zone, _ in nodes})
        try:
            for zone in zones:
                request = compute_v1.ListInstancesRequest(
                    project=self._project, zone=zone, max_results=self._page_size
                )
                for page in self._instances.list(request=request).pages:
                    pages += 1
                    for instance in page.items:
                        listed += 1
                        self._read(instance, zone, nodes, events, unknown, refused)
        except gexc.GoogleAPICallError as exc:
            return self._health.down(now, str(wrap(exc, "instances.list")))
        except (ValueError, TypeError, KeyError) as exc:
            return self._health.down(
                now, f"GCE instances.list: malformed answer: {type(exc).__name__}: {exc}"
            )
        signals = self._book.update(events, now, unsure={event_id for event_id, _ in refused})
        detail = {
            "zones": str(len(zones)),
            "instances": str(listed),
            "pages": str(pages),
            "open_events": str(len(self._book)),
            "unknown_instances": str(self._unknown.count(unknown)),
        }
        if refused:
            detail |= {"refused": str(len(refused)), "refused_example": refused[0][1][:300]}
        return self._health.ok(now, tuple(signals), detail)

    def _read(
        self,
        instance: Any,
        zone: str,
        nodes: Mapping[tuple[str, str], str],
        events: list[MaintenanceEvent],
        unknown: list[str],
        refused: list[tuple[str, str]],
    ) -> None:
        node = nodes.get((zone, instance.name))
        event_id = f"gce-{instance.id}-maintenance"
        try:
            event = event_of(instance, zone, node or "unknown")
        except ValidationError as exc:
            why = validation_message(exc, "event")
            refused.append((event_id, f"{zone}/{instance.name}: {why}"))
            return
        if event is None:
            return
        if node is None:
            unknown.append(event_id)
            return
        events.append(event)
