"""Maintenance the cloud or the GPU announced ahead: one `maintenance` signal per event.

Clouds announce host work days ahead (EC2 scheduled events, Compute Engine's
`upcomingMaintenance`) and DCGM reports row remaps waiting for a GPU reset. Unlike a fault, such
an event has an identity (the cloud's event id), a window and often a deadline, and it changes:
the cloud reschedules it, then completes or cancels it. `MaintenanceEvent` is that shape, checked
at the edge; `MaintenanceBook` keeps the open events of one source across polls, so that each
appears as one signal per poll (its labels carry the event), a changed window reads
`rescheduled`, and an event the cloud completes, cancels or stops reporting is announced once as
ended and then forgotten. The signal's labels are the event (strings, as every signal's labels),
so the archive keeps each version of it as its own run and policies match it by label
(`labels: {code: system-reboot}`); `MaintenanceEvent.of` reads it back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from remediator.signals.bounds import MAX_GPU_INDEX
from remediator.signals.model import Signal, SignalKind


class MaintenanceOrigin(StrEnum):
    AWS = "aws"
    GCE = "gce"
    DCGM = "dcgm"


class MaintenanceStatus(StrEnum):
    SCHEDULED = "scheduled"
    RESCHEDULED = "rescheduled"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


ENDED = frozenset({MaintenanceStatus.COMPLETED, MaintenanceStatus.CANCELLED})

# Each origin's codes, numbered for `Signal.code` (a policy may match `codes:` or the label).
# EC2: InstanceStatusEvent.Code's valid values. Compute Engine: UpcomingMaintenance.type (the
# API's own wire strings; UNKNOWN_TYPE and UNDEFINED_TYPE say "no type given"). DCGM: a row remap
# that waits for the GPU's reset (DCGM_FI_DEV_ROW_REMAP_PENDING).
CODES: dict[MaintenanceOrigin, dict[str, int]] = {
    MaintenanceOrigin.AWS: {
        "instance-reboot": 1,
        "system-reboot": 2,
        "system-maintenance": 3,
        "instance-retirement": 4,
        "instance-stop": 5,
    },
    MaintenanceOrigin.GCE: {
        "SCHEDULED": 11,
        "UNSCHEDULED": 12,
        "MULTIPLE": 13,
        "UNKNOWN_TYPE": 14,
        "UNDEFINED_TYPE": 15,
    },
    MaintenanceOrigin.DCGM: {"row-remap-pending": 21},
}
ROW_REMAP_PENDING = "row-remap-pending"
MAX_ID = 256
MAX_DESCRIPTION = 512


def _iso(when: datetime | None) -> str:
    return "" if when is None else when.isoformat()


class MaintenanceEvent(BaseModel):
    """One announced maintenance of one instance (or one GPU's pending row remap).

    `window_start`/`window_end`: AWS NotBefore/NotAfter, GCE windowStartTime/windowEndTime.
    `deadline`: the latest the work may start (AWS NotBeforeDeadline, GCE
    latestWindowStartTime); DCGM's has none. Once it has passed, the event is `overdue`: there is
    no moment left to plan, so the planner takes the urgent path."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str = Field(min_length=1, max_length=MAX_ID)
    code: str = Field(min_length=1, max_length=64)
    origin: MaintenanceOrigin
    instance_id: str = Field(min_length=1, max_length=MAX_ID)
    node: str = Field(min_length=1, max_length=253)
    status: MaintenanceStatus = MaintenanceStatus.SCHEDULED
    window_start: AwareDatetime | None = None
    window_end: AwareDatetime | None = None
    deadline: AwareDatetime | None = None
    can_reschedule: bool = False
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    gpu: int | None = Field(default=None, ge=0, le=MAX_GPU_INDEX)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        known = CODES[self.origin]
        if self.code not in known:
            raise ValueError(
                f"{self.origin.value} maintenance code {self.code[:64]!r} is not one of "
                f"{', '.join(known)}"
            )
        if self.window_start and self.window_end and self.window_end < self.window_start:
            raise ValueError("window_end is before window_start")
        if self.origin is MaintenanceOrigin.DCGM and self.deadline is not None:
            raise ValueError("a DCGM row remap has no deadline")
        return self

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def schedule(self) -> tuple[datetime | None, datetime | None, datetime | None]:
        return (self.window_start, self.window_end, self.deadline)

    def overdue(self, now: datetime) -> bool:
        return not self.ended and self.deadline is not None and self.deadline <= now

    def signal(self, source: str, now: datetime, since: datetime | None = None) -> Signal:
        labels = {
            "event_id": self.event_id,
            "code": self.code,
            "source": self.origin.value,
            "instance_id": self.instance_id,
            "status": self.status.value,
            "window_start": _iso(self.window_start),
            "window_end": _iso(self.window_end),
            "deadline": _iso(self.deadline),
            "can_reschedule": "true" if self.can_reschedule else "false",
            "overdue": "true" if self.overdue(now) else "false",
            "description": self.description,
        }
        return Signal(
            node=self.node,
            kind=SignalKind.MAINTENANCE,
            source=source,
            observed_at=now,
            gpu=self.gpu,
            code=CODES[self.origin][self.code],
            since=since if since is not None and since <= now else None,
            labels=labels,
        )

    @classmethod
    def of(cls, signal: Signal) -> MaintenanceEvent:
        """The event a `maintenance` signal carries; ValueError when it carries none."""
        if signal.kind is not SignalKind.MAINTENANCE:
            raise ValueError(f"a {signal.kind.value} signal is not a maintenance event")
        labels = signal.labels
        try:
            return cls.model_validate(
                {
                    "event_id": labels.get("event_id", ""),
                    "code": labels.get("code", ""),
                    "origin": labels.get("source", ""),
                    "instance_id": labels.get("instance_id", ""),
                    "node": signal.node,
                    "status": labels.get("status", ""),
                    "window_start": labels.get("window_start") or None,
                    "window_end": labels.get("window_end") or None,
                    "deadline": labels.get("deadline") or None,
                    "can_reschedule": labels.get("can_reschedule") == "true",
                    "description": labels.get("description", ""),
                    "gpu": signal.gpu,
                }
            )
        except (ValidationError, ValueError) as exc:
            raise ValueError(f"maintenance signal on {signal.node}: {exc}") from exc


class MaintenanceBook:
    """The open events of one source, by event id, across its polls.

    `update` takes one complete answer of the source (every event it reports now, ended ones
    included) and returns what to emit: each open event once, `rescheduled` from the poll its
    window or deadline changed on; each event that ended (its status says so, or it is no longer
    reported: `vanished` says which end that means for this source) once. An event whose status
    said it ended stays ended (a completed EC2 event is described for a week), and one never
    opened here is not news; one that merely vanished and comes back is open again (a GPU whose
    rows wait for a reset once more). Call it only with a complete answer: a failed poll must not
    end anything."""

    def __init__(self, source: str, remember: int = 10_000) -> None:
        self.source = source
        self._open: dict[str, tuple[MaintenanceEvent, datetime]] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def __len__(self) -> int:
        return len(self._open)

    def open_events(self) -> list[MaintenanceEvent]:
        return [event for event, _ in self._open.values()]

    def update(
        self,
        seen: Iterable[MaintenanceEvent],
        now: datetime,
        vanished: MaintenanceStatus = MaintenanceStatus.COMPLETED,
        unsure: Iterable[str] = (),
    ) -> list[Signal]:
        """`unsure`: ids the answer named but in a shape the source refused; an open one
        stays open as it was (a refused answer is not an ended event)."""
        current: dict[str, MaintenanceEvent] = {}
        for event_id in unsure:
            known = self._open.get(event_id)
            if known is not None:
                current[event_id] = known[0]
        for event in seen:
            current[event.event_id] = event  # a repeat within one answer is the same event
        out: list[Signal] = []
        for event_id, event in current.items():
            known = self._open.get(event_id)
            if event.ended:
                if known is not None:
                    out.append(event.signal(self.source, now, known[1]))
                    self._open.pop(event_id)
                self._remember_ended(event_id)
                continue
            if event_id in self._ended:
                continue
            since = now if known is None else known[1]
            if known is not None and (
                known[0].schedule != event.schedule
                or known[0].status is MaintenanceStatus.RESCHEDULED
            ):
                event = event.model_copy(update={"status": MaintenanceStatus.RESCHEDULED})
            self._open[event_id] = (event, since)
            out.append(event.signal(self.source, now, since))
        for event_id in [e for e in self._open if e not in current]:
            gone, since = self._open[event_id]
            out.append(gone.model_copy(update={"status": vanished}).signal(self.source, now, since))
            del self._open[event_id]
        return out

    def _remember_ended(self, event_id: str) -> None:
        self._ended[event_id] = None
        self._ended.move_to_end(event_id)
        while len(self._ended) > self._remember:
            self._ended.popitem(last=False)


class NewIds:
    """Counts ids not seen before (the latest `remember` kept): an event on an instance outside
    the cluster is counted once, not at every poll that describes it again."""

    def __init__(self, remember: int = 10_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def count(self, ids: Iterable[str]) -> int:
        new = 0
        for one in ids:
            if one not in self._seen:
                new += 1
            self._seen[one] = None
            self._seen.move_to_end(one)
        while len(self._seen) > self._remember:
            self._seen.popitem(last=False)
        return new
