"""An RMA case's status as a forward-only sequence, and the pure check of a requested move.

Ticket systems resend: a move to the status the case already has is a no-op (idempotent), a move
back is refused, a move forward may skip statuses (a vendor that ships the replacement at once).

A case's history is its events, oldest first: the opening, each move and each note (a line with
`event: note`, the status unchanged). The webhook tells each one in order; a line the ticket
system took carries `delivered_at`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from remediator.errors import RemediatorError


class RmaStatus(StrEnum):
    OPENED = "opened"
    ACKNOWLEDGED = "acknowledged"
    SHIPPED = "shipped"
    REPLACED = "replaced"
    CLOSED = "closed"


ORDER: tuple[RmaStatus, ...] = tuple(RmaStatus)


class Target(StrEnum):
    GPU = "gpu"
    MACHINE = "machine"


NOTE = "note"  # a history line's `event` when it records a note, not a move
DELIVERED_AT = "delivered_at"  # on a history line the ticket system took


class MoveRefused(RemediatorError):
    """A backward move: the case keeps its status."""


def check_move(current: RmaStatus, target: RmaStatus) -> bool:
    """True when the move changes the case, False for a duplicate; MoveRefused going back."""
    if target is current:
        return False
    if ORDER.index(target) < ORDER.index(current):
        raise MoveRefused(
            f"case is {current.value}: it only moves forward "
            f"({' → '.join(s.value for s in ORDER)}), not back to {target.value}"
        )
    return True


@dataclass(frozen=True)
class RmaCase:
    id: int
    cluster: str
    target: Target
    # The GPU's UUID, or the machine's id (providerID or DMI serial; the node name if unknown).
    hardware_id: str
    node: str
    gpu_index: int | None
    remediation_id: int | None
    status: RmaStatus
    reason: str
    opened_at: datetime
    updated_at: datetime
    history: tuple[dict[str, Any], ...]
    bundle: dict[str, Any]
    webhook_state: str  # "none" (no webhook), "pending", "delivered"
    webhook_attempts: int
    webhook_next_at: datetime | None
    webhook_error: str | None
    delivered_at: datetime | None

    def age_seconds(self, now: datetime) -> float:
        return max(0.0, (now - self.opened_at).total_seconds())

    def untold(self) -> int | None:
        """The first history line the ticket system has not taken (None: all were)."""
        for index, line in enumerate(self.history):
            if DELIVERED_AT not in line:
                return index
        return None


def event_name(history: Sequence[Mapping[str, Any]], index: int) -> str:
    """What the webhook calls the history line: the opening, a move or a note."""
    if index == 0:
        return "rma.opened"
    return "rma.noted" if history[index].get("event") == NOTE else "rma.updated"


def is_repeat(history: Sequence[Mapping[str, Any]], note: str) -> bool:
    """A note the last line already carries: a ticket system's resend, written once."""
    return bool(history) and history[-1].get("note") == note


def age_text(seconds: float) -> str:
    """A case's age as on-call reads it: the two largest units."""
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m"
