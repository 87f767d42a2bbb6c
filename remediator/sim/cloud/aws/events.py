"""EC2 scheduled events, which moto does not keep: its `DescribeInstanceStatus` answers every
instance with no `eventsSet` at all. The proxy asks moto for the statuses, adds each instance's
events in EC2's wire shape (`eventsSet/item`: instanceEventId, code, description, notBefore,
notAfter, notBeforeDeadline) and pages the answer itself (`MaxResults` 5-1000, an opaque
`NextToken`), as EC2 does and moto does not.

Events are set through the proxy's `/_sim/events` API: create one for an instance (or a node's
instance), reschedule it (what `ModifyInstanceEventStartTime` does: a new `notBefore`, not after
its `notBeforeDeadline`, the window keeping its length), complete or cancel it. EC2 keeps
describing an ended event for about a week with its description prefixed `[Completed]` or
`[Canceled]`; so does the simulator (until the process ends).
"""

from __future__ import annotations

import base64
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from xml.etree import ElementTree as ET

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

EVENT_CODES = (
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
)
DESCRIPTIONS = {
    "instance-reboot": "The instance is scheduled for a reboot",
    "system-reboot": "The system is scheduled for a reboot",
    "system-maintenance": "The system is scheduled for maintenance",
    "instance-retirement": "The instance is running on degraded hardware",
    "instance-stop": "The instance is scheduled to be stopped",
}
MAX_RESULTS = (5, 1000)


class EventRequest(BaseModel):
    """`POST /_sim/events`: `instance_id`, or `node` for the instance behind a node."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str | None = None
    node: str | None = None
    code: Literal[
        "instance-reboot",
        "system-reboot",
        "system-maintenance",
        "instance-retirement",
        "instance-stop",
    ]
    not_before: AwareDatetime
    not_after: AwareDatetime | None = None
    not_before_deadline: AwareDatetime | None = None
    description: str | None = Field(default=None, max_length=255)


class RescheduleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    not_before: AwareDatetime


class EventProblem(Exception):
    """A request EC2 would refuse: `code` is EC2's error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


@dataclass
class ScheduledEvent:
    event_id: str
    instance_id: str
    code: str
    description: str
    not_before: datetime
    not_after: datetime | None
    not_before_deadline: datetime | None
    state: Literal["scheduled", "completed", "canceled"] = "scheduled"

    def wire(self) -> dict[str, str]:
        prefix = {"completed": "[Completed] ", "canceled": "[Canceled] "}.get(self.state, "")
        out = {
            "instanceEventId": self.event_id,
            "code": self.code,
            "description": prefix + self.description,
            "notBefore": _stamp(self.not_before),
        }
        if self.not_after is not None:
            out["notAfter"] = _stamp(self.not_after)
        if self.not_before_deadline is not None:
            out["notBeforeDeadline"] = _stamp(self.not_before_deadline)
        return out


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class ScheduledEvents:
    def __init__(self) -> None:
        self._events: dict[str, ScheduledEvent] = {}
        self._lock = threading.Lock()

    def create(self, instance_id: str, request: EventRequest) -> ScheduledEvent:
        not_after = request.not_after
        if not_after is not None and not_after < request.not_before:
            raise EventProblem(400, "InvalidParameterValue", "not_after is before not_before")
        deadline = request.not_before_deadline
        if deadline is not None and deadline < request.not_before:
            raise EventProblem(
                400, "InvalidParameterValue", "not_before_deadline is before not_before"
            )
        event = ScheduledEvent(
            event_id=f"instance-event-{secrets.token_hex(9)[:17]}",
            instance_id=instance_id,
            code=request.code,
            description=request.description or DESCRIPTIONS[request.code],
            not_before=request.not_before,
            not_after=not_after,
            not_before_deadline=deadline,
        )
        with self._lock:
            self._events[event.event_id] = event
        return event

    def _scheduled(self, event_id: str) -> ScheduledEvent:
        event = self._events.get(event_id)
        if event is None:
            raise EventProblem(
                404, "InvalidInstanceEventID.NotFound", f"The event ID '{event_id}' does not exist"
            )
        if event.state != "scheduled":
            raise EventProblem(
                400, "IncorrectState", f"The event '{event_id}' is {event.state} already"
            )
        return event

    def reschedule(self, event_id: str, not_before: datetime) -> ScheduledEvent:
        with self._lock:
            event = self._scheduled(event_id)
            deadline = event.not_before_deadline
            if deadline is not None and not_before > deadline:
                raise EventProblem(
                    400,
                    "InvalidParameterValue",
                    f"The new start time must not be after the deadline {_stamp(deadline)}",
                )
            shift = not_before - event.not_before
            event.not_before = not_before
            if event.not_after is not None:
                event.not_after += shift
            return event

    def end(self, event_id: str, state: Literal["completed", "canceled"]) -> ScheduledEvent:
        with self._lock:
            event = self._scheduled(event_id)
            event.state = state
            return event

    def of(self, instance_id: str) -> list[ScheduledEvent]:
        with self._lock:
            return [e for e in self._events.values() if e.instance_id == instance_id]

    def all(self) -> list[ScheduledEvent]:
        with self._lock:
            return list(self._events.values())


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"sim-offset:{offset}".encode()).decode()


def _offset(token: str) -> int | None:
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    prefix, _, number = text.partition(":")
    return int(number) if prefix == "sim-offset" and number.isdigit() else None


def page_size(raw: str | None, with_ids: bool) -> int | None:
    """The `MaxResults` of a request: None for all; EventProblem as EC2 refuses it."""
    if raw is None:
        return None
    if with_ids:
        raise EventProblem(
            400,
            "InvalidParameterCombination",
            "The parameter instancesSet cannot be used with the parameter maxResults",
        )
    low, high = MAX_RESULTS
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise EventProblem(
            400,
            "InvalidParameterValue",
            f"Value ( {raw} ) for parameter maxResults is invalid. "
            f"Expecting a value between {low} and {high}.",
        )
    return int(raw)


def with_events(
    moto_xml: bytes, events: ScheduledEvents, max_results: int | None, next_token: str | None
) -> bytes:
    """moto's `DescribeInstanceStatusResponse` with each instance's events and EC2's paging."""
    root = ET.fromstring(moto_xml)
    ns = root.tag[1:].partition("}")[0] if root.tag.startswith("{") else ""
    ET.register_namespace("", ns)

    def q(name: str) -> str:
        return f"{{{ns}}}{name}" if ns else name

    status_set = root.find(q("instanceStatusSet"))
    if status_set is None:
        status_set = ET.SubElement(root, q("instanceStatusSet"))
    items = sorted(status_set.findall(q("item")), key=lambda i: i.findtext(q("instanceId"), ""))
    start = 0
    if next_token:
        found = _offset(next_token)
        if found is None or found > len(items):
            raise EventProblem(400, "InvalidNextToken", "The specified token is invalid")
        start = found
    end = len(items) if max_results is None else min(len(items), start + max_results)
    for item in list(status_set):
        status_set.remove(item)
    for item in items[start:end]:
        for old in item.findall(q("eventsSet")):
            item.remove(old)
        found_events = events.of(item.findtext(q("instanceId"), ""))
        if found_events:
            events_set = ET.SubElement(item, q("eventsSet"))
            for event in found_events:
                entry = ET.SubElement(events_set, q("item"))
                for name, value in event.wire().items():
                    ET.SubElement(entry, q(name)).text = value
        status_set.append(item)
    for old in root.findall(q("nextToken")):
        root.remove(old)
    if end < len(items):
        ET.SubElement(root, q("nextToken")).text = _token(end)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
