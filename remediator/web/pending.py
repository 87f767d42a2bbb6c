"""Whether a human's command still waits for the controller that owns the remediation: the
console writes a command to the database, and the leader of that cluster's controller carries it
out on its next tick (the fleet console has no access to the cluster at all). Until a step of
the controller's follows the command, the command is pending; when that controller has not been
seen lately, the console says so instead of letting the command look stuck. Pure: the caller
passes the record, when the controller was last seen and now."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from remediator.model.states import TERMINAL
from remediator.store.records import EventRecord, RemediationRecord

# A controller heartbeats every 10 s; past this its cluster's commands wait for it.
CONTROLLER_SILENT_AFTER = timedelta(seconds=30)
CONTROLLER_PREFIX = "controller "


class PendingOut(BaseModel):
    command: str
    asked_by: str
    asked_at: datetime
    waiting_seconds: float
    controller_problem: str | None = Field(
        description="set when the owning controller has not been seen lately"
    )


def silence(cluster: str, seen_at: datetime | None, now: datetime) -> str | None:
    """Why commands on `cluster` are not being carried out, or None."""
    if seen_at is None:
        return f"controller of cluster {cluster} never seen: commands wait until it runs"
    quiet = (now - seen_at).total_seconds()
    if quiet <= CONTROLLER_SILENT_AFTER.total_seconds():
        return None
    return (
        f"controller of cluster {cluster} not seen for {int(quiet)} s: commands wait until it "
        "returns"
    )


def _command(event: EventRecord) -> str | None:
    if event.actor.startswith(CONTROLLER_PREFIX):
        return None
    found = event.detail.get("command")
    return found if isinstance(found, str) else None


def pending_command(
    record: RemediationRecord, seen_at: Callable[[], datetime | None], now: datetime
) -> PendingOut | None:
    """The newest event is a human's command and the controller has not acted since: on an
    open remediation, no controller step follows it yet; on a finished one (a cancel), the
    controller has not run since (its next cycle releases the node). `seen_at` (when the
    owning controller was last seen) is asked only when there is a command to judge."""
    if not record.events:
        return None
    last = record.events[-1]
    command = _command(last)
    if command is None:
        return None
    controller_seen_at = seen_at()
    acted = controller_seen_at is not None and controller_seen_at > last.at
    if record.state in TERMINAL and acted:
        return None
    return PendingOut(
        command=command,
        asked_by=last.actor,
        asked_at=last.at,
        waiting_seconds=max(0.0, (now - last.at).total_seconds()),
        controller_problem=silence(record.cluster, controller_seen_at, now),
    )
