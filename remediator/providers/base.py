"""The narrow contract remediator needs from a cloud's node pools: ask for a replacement, follow
the operation, tell how much spare capacity is left, and reboot one node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from remediator.errors import PermanentError


class OperationState(StrEnum):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class Operation:
    """A replacement as the provider tracks it; `error` is "code: message" once it failed;
    `detail` carries the provider's own names for it (instances, activities, machines)."""

    id: str
    pool: str
    node: str
    state: OperationState
    new_node: str | None = None
    error: str | None = None
    detail: Mapping[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state in (OperationState.SUCCEEDED, OperationState.FAILED)


class ReplacementHeld(PermanentError):
    """The platform says not now (an opt-out, a pause, no capacity): hold with the reason."""


class ReplacementPaused(ReplacementHeld):
    """The platform's controllers are paused (a Cluster API pause): nothing would carry the
    request out now, but the pause is lifted without us, so the step waits and asks again."""


class CapacityExhausted(ReplacementHeld):
    """The pool has no spare node to give: replacing would only remove capacity."""

    def __init__(self, pool: str, message: str = "") -> None:
        ours = f"node pool {pool!r} has no spare capacity for a replacement"
        # A platform that says so itself (naming the pool) is quoted alone, not after ours.
        if "spare capacity" in message.lower() and pool in message:
            text = message
        else:
            text = f"{ours}: {message}" if message else ours
        super().__init__(text)
        self.pool = pool


@dataclass(frozen=True)
class RebootReceipt:
    """The provider accepted a reboot; the Node's new boot id tells when it happened. `detail`
    names it in the provider's own terms (instance, operation, Machine)."""

    id: str
    pool: str
    node: str
    detail: Mapping[str, str] = field(default_factory=dict)


class RebootUnsupported(PermanentError):
    """This provider cannot reboot a node: a privileged Job on the node does it instead."""


class NodePoolProvider(Protocol):
    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        """Start replacing `node`; the same key always returns the same operation."""
        ...

    def get_operation(self, op_id: str) -> Operation: ...

    def spare_capacity(self, pool: str) -> int | None:
        """Nodes the pool can still hand out; None when the provider cannot tell."""
        ...

    def reboot(self, pool: str, node: str, idempotency_key: str, reason: str) -> RebootReceipt:
        """Power-cycle `node`; the same key never reboots twice. RebootUnsupported when the
        provider cannot."""
        ...


class MaintenanceUnsupported(PermanentError):
    """The cloud offers no way for us to start this maintenance early: wait for it instead (or,
    for a retirement, replace the node ahead of it)."""


# EC2 scheduled events a user-initiated RebootInstances answers: instance-reboot is done by it;
# system-reboot attempts reboot migration to new hardware, which clears the event on success.
EC2_REBOOT_EVENTS = frozenset({"instance-reboot", "system-reboot"})


@runtime_checkable
class MaintenanceTrigger(Protocol):
    def trigger_maintenance(
        self, pool: str, node: str, event: str, idempotency_key: str, reason: str
    ) -> RebootReceipt:
        """Start the cloud's announced maintenance `event` (its code) on `node` now, once per
        key; MaintenanceUnsupported when this cloud or this event allows no such thing."""
        ...


RACK_ACTIONS = ("repair", "replace")


class RackUnsupported(PermanentError):
    """This provider cannot act on a whole rack (an NVLink domain) as one operation."""


@runtime_checkable
class RackOperator(Protocol):
    def request_rack_operation(
        self, pool: str, rack: str, action: str, idempotency_key: str, reason: str
    ) -> Operation:
        """Repair (mend the switches, power-cycle the trays) or replace `rack` as one operation,
        followed with get_operation like a replacement; the same key returns the same one."""
        ...


def request_rack_operation(
    provider: object, pool: str, rack: str, action: str, idempotency_key: str, reason: str
) -> Operation:
    """Through `provider` when it can act on racks at all."""
    if action not in RACK_ACTIONS:
        raise PermanentError(f"no rack action {action!r}: one of {', '.join(RACK_ACTIONS)}")
    if not isinstance(provider, RackOperator):
        name = type(provider).__name__
        raise RackUnsupported(f"{name} cannot {action} a rack ({rack} in {pool})")
    return provider.request_rack_operation(pool, rack, action, idempotency_key, reason)


def trigger_maintenance(
    provider: object, pool: str, node: str, event: str, idempotency_key: str, reason: str
) -> RebootReceipt:
    """Through `provider` when it can trigger maintenance at all."""
    if not isinstance(provider, MaintenanceTrigger):
        name = type(provider).__name__
        raise MaintenanceUnsupported(f"{name} cannot trigger maintenance ({node} in {pool})")
    return provider.trigger_maintenance(pool, node, event, idempotency_key, reason)
