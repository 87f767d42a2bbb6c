"""Compute Engine managed instance groups as node pools (GKE node pools are MIGs), through the
official `google-cloud-compute` client.

Replacement is `instanceGroupManagers.recreateInstances` of the node's instance: the MIG deletes
the VM and creates a new one under the same name, so the pool keeps its size and the Node comes
back under its old name (GKE names a node after its instance). `deleteInstances` would shrink the
group instead, leaving the replacement to an autoscaler — not what a remediation wants.

The request carries a `requestId` derived from our remediation key: Compute Engine answers a
repeated requestId with the original operation, so a retry or a restart after a crash never
recreates twice. The operation id is `PROJECT/ZONE/GROUP/INSTANCE/OPERATION`. The MIG operation is
DONE once the MIG accepted the request; the work shows in the managed instance's `currentAction`
(RECREATING → CREATING → NONE with `instanceStatus` RUNNING), and the replacement succeeds when a
Node of that name created after the request is Ready.

Reboot is `instances.reset` of the node's VM (a hard power-cycle), with a `requestId` from the
key, so a repeat returns the first operation and never resets twice (Compute Engine keeps request
ids for at least 60 minutes, far longer than a reboot step). The provider follows the zonal
operation with `zoneOperations.wait` itself: the client's own ExtendedOperation polls through an
operations client that ignores `api_endpoint`.

Planned maintenance (`trigger_maintenance`) is `instances.performMaintenance`, allowed only while
the instance's `upcomingMaintenance.canReschedule` is true: Compute Engine then starts the
announced maintenance now instead of in its window. Same requestId and wait as a reset.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from remediator.clock import utcnow
from remediator.errors import NotFoundError, PermanentError, RemediatorError, TransientError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.providers.base import (
    MaintenanceUnsupported,
    Operation,
    OperationState,
    RebootReceipt,
    RebootUnsupported,
)
from remediator.settings import GceProviderSettings

RETRYABLE = (gexc.TooManyRequests, gexc.ServiceUnavailable, gexc.InternalServerError)
CAPACITY_CODES = frozenset(
    {"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"}
)


def parse_provider_id(provider_id: str) -> tuple[str, str, str]:
    """`gce://PROJECT/ZONE/NAME` → (project, zone, name)."""
    scheme, _, rest = provider_id.partition("://")
    parts = rest.split("/")
    if scheme != "gce" or len(parts) != 3 or not all(parts):
        raise PermanentError(f"providerID {provider_id!r} is not a GCE instance (gce://P/Z/NAME)")
    return parts[0], parts[1], parts[2]


def request_id(idempotency_key: str) -> str:
    """A stable UUID per remediation key: Compute Engine's own idempotency token."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"remediator:{idempotency_key}"))


def wrap(exc: gexc.GoogleAPICallError, what: str) -> RemediatorError:
    text = f"GCE: {what}: {exc.code} {exc.message}"
    if isinstance(exc, RETRYABLE):
        return TransientError(text, delay=5.0)
    if isinstance(exc, gexc.NotFound):
        return NotFoundError(text)
    return PermanentError(text)


def attempt_errors(managed: Any) -> list[str]:
    """`CODE: message` of a managed instance's last failed attempt."""
    errors = managed.last_attempt.errors.errors if managed.last_attempt else []
    return [f"{e.code}: {e.message}" for e in errors]


class GceProvider:
    def __init__(
        self,
        kube: KubeClient,
        igms: Any,
        operations: Any,
        *,
        project: str,
        groups: dict[str, str] | None = None,
        launch_timeout: float = 900.0,
        now: Callable[[], datetime] = utcnow,
        instances: Any = None,
    ) -> None:
        self._kube = kube
        self._instances = instances
        self._igms = igms
        self._ops = operations
        self._project = project
        self._groups = dict(groups or {})
        self._launch_timeout = launch_timeout
        self._now = now

    @classmethod
    def from_settings(cls, settings: GceProviderSettings, kube: KubeClient) -> GceProvider:
        options = (
            ClientOptions(api_endpoint=settings.api_endpoint) if settings.api_endpoint else None
        )
        credentials = AnonymousCredentials() if settings.anonymous else None
        kwargs: dict[str, Any] = {
            "credentials": credentials,
            "client_options": options,
            "transport": "rest",
        }
        return cls(
            kube,
            compute_v1.InstanceGroupManagersClient(**kwargs),
            compute_v1.ZoneOperationsClient(**kwargs),
            project=settings.project,
            groups=settings.groups,
            launch_timeout=settings.launch_timeout_seconds,
            instances=compute_v1.InstancesClient(**kwargs),
        )

    def _call(self, what: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return call(**kwargs)
        except gexc.GoogleAPICallError as exc:
            raise wrap(exc, what) from exc

    def _group(self, pool: str, zone: str | None) -> tuple[str, str]:
        """(zone, group) of a pool: `groups[pool]` = "ZONE/GROUP", else the group named like it."""
        zone_group = self._groups.get(pool)
        if zone_group:
            found_zone, _, group = zone_group.partition("/")
            return found_zone, group
        if zone is None:
            raise PermanentError(f"pool {pool}: no groups entry and no node to read its zone from")
        return zone, pool

    # -- the protocol ------------------------------------------------------------------------

    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        try:
            project, zone, instance = parse_provider_id(self._kube.get_node(node).provider_id)
        except NotFoundError:
            # Recreated already (the Node left with its VM): the same requestId finds the same
            # operation, and GKE names the instance after the node.
            project, zone, instance = self._project, None, node
        zone, group = self._group(pool, zone)
        request = compute_v1.RecreateInstancesInstanceGroupManagerRequest(
            project=project,
            zone=zone,
            instance_group_manager=group,
            request_id=request_id(idempotency_key),
            instance_group_managers_recreate_instances_request_resource=(
                compute_v1.InstanceGroupManagersRecreateInstancesRequest(
                    instances=[f"zones/{zone}/instances/{instance}"]
                )
            ),
        )
        op = self._call(
            f"recreate {instance} in {group}", self._igms.recreate_instances_unary, request=request
        )
        return self.get_operation(f"{project}/{zone}/{group}/{instance}/{op.name}")

    def get_operation(self, op_id: str) -> Operation:
        parts = op_id.split("/")
        if len(parts) != 5 or not all(parts):
            raise PermanentError(f"{op_id!r} is not a GCE replacement id (P/ZONE/GROUP/NAME/OP)")
        project, zone, group, instance, name = parts
        op = self._call(
            f"operation {name}", self._ops.get, project=project, zone=zone, operation=name
        )
        base: dict[str, Any] = {
            "id": op_id,
            "pool": group,
            "node": instance,
            "detail": {
                "instance_group": f"{zone}/{group}",
                "instance": instance,
                "operation": name,
            },
        }
        errors = list(op.error.errors) if op.error and op.error.errors else []
        if errors:
            text = "; ".join(f"{e.code}: {e.message}" for e in errors)
            return Operation(**base, state=OperationState.FAILED, error=text)
        if op.status != compute_v1.Operation.Status.DONE:
            return Operation(**base, state=OperationState.PENDING)
        inserted = datetime.fromisoformat(op.insert_time).astimezone(UTC).replace(microsecond=0)
        managed = self._managed(project, zone, group, instance)
        action = managed.current_action if managed else "UNKNOWN"
        failures = attempt_errors(managed) if managed else []
        if action == "CREATING" and any(f.split(":")[0] in CAPACITY_CODES for f in failures):
            return Operation(**base, state=OperationState.FAILED, error="; ".join(failures))
        node = self._node(instance)
        fresh = node is not None and node.created_at is not None and node.created_at >= inserted
        if action == "NONE" and fresh and node is not None and node.ready:
            return Operation(**base, state=OperationState.SUCCEEDED, new_node=instance)
        if (self._now() - inserted).total_seconds() > self._launch_timeout:
            where = "not Ready" if fresh else "not registered again"
            error = (
                f"launch_timeout: instance {instance} ({action}) node {where} "
                f"within {self._launch_timeout:.0f}s"
            )
            return Operation(**base, state=OperationState.FAILED, error=error)
        return Operation(**base, state=OperationState.PROVISIONING)

    def spare_capacity(self, pool: str) -> int | None:
        """A MIG has no ceiling of its own (GKE's autoscaler limits live elsewhere), and
        recreating keeps its size: unknown."""
        return None

    def reboot(self, pool: str, node: str, idempotency_key: str, reason: str) -> RebootReceipt:
        """`instances.reset` of the node's VM, once per key (its requestId); waits for the
        operation: DONE means the VM was power-cycled, an error on it stops the step."""
        return self._instance_call(
            "reset", self._reset_request, pool, node, idempotency_key, "compute.instances.reset"
        )

    def trigger_maintenance(
        self, pool: str, node: str, event: str, idempotency_key: str, reason: str
    ) -> RebootReceipt:
        """`instances.performMaintenance`, once per key (module docstring). `event` is the
        instance's upcomingMaintenance type; Compute Engine itself refuses it unless
        canReschedule, and that refusal stops the step with its reason."""
        receipt = self._instance_call(
            "performMaintenance",
            self._maintenance_request,
            pool,
            node,
            idempotency_key,
            "compute.instances.performMaintenance",
        )
        return RebootReceipt(
            receipt.id, receipt.pool, receipt.node, {**receipt.detail, "event": event}
        )

    def _reset_request(self, project: str, zone: str, instance: str, rid: str) -> Any:
        request = compute_v1.ResetInstanceRequest(
            project=project, zone=zone, instance=instance, request_id=rid
        )
        return self._instances.reset_unary(request=request)

    def _maintenance_request(self, project: str, zone: str, instance: str, rid: str) -> Any:
        request = compute_v1.PerformMaintenanceInstanceRequest(
            project=project, zone=zone, instance=instance, request_id=rid
        )
        return self._instances.perform_maintenance_unary(request=request)

    def _instance_call(
        self,
        verb: str,
        send: Callable[[str, str, str, str], Any],
        pool: str,
        node: str,
        idempotency_key: str,
        call: str,
    ) -> RebootReceipt:
        """One instance operation, once per key (its requestId), waited for until DONE."""
        if self._instances is None:
            if verb == "reset":
                raise RebootUnsupported(f"no Compute Engine instances client ({node} in {pool})")
            raise MaintenanceUnsupported(f"no Compute Engine instances client ({node} in {pool})")
        project, zone, instance = parse_provider_id(self._kube.get_node(node).provider_id)
        rid = request_id(idempotency_key)
        try:
            op = send(project, zone, instance, rid)
        except gexc.GoogleAPICallError as exc:
            raise wrap(exc, f"{verb} {instance}") from exc
        if op.status != compute_v1.Operation.Status.DONE:
            op = self._call(
                f"wait for {verb} {op.name}",
                self._ops.wait,
                project=project,
                zone=zone,
                operation=op.name,
            )
        errors = list(op.error.errors) if op.error and op.error.errors else []
        if errors:
            text = "; ".join(f"{e.code}: {e.message}" for e in errors)
            raise PermanentError(f"GCE: {verb} {instance} failed: {text}")
        if op.status != compute_v1.Operation.Status.DONE:
            raise TransientError(f"GCE: {verb} {instance} ({op.name}) is still {op.status.name}")
        return RebootReceipt(
            id=op.name,
            pool=pool,
            node=node,
            detail={"call": call, "instance": instance, "zone": zone, "operation": op.name},
        )

    # -- reading -----------------------------------------------------------------------------

    def _managed(self, project: str, zone: str, group: str, instance: str) -> Any:
        pages: Iterable[Any] = self._call(
            f"list instances of {group}",
            self._igms.list_managed_instances,
            project=project,
            zone=zone,
            instance_group_manager=group,
        )
        for managed in pages:
            if managed.instance.rsplit("/", 1)[-1] == instance:
                return managed
        return None

    def _node(self, name: str) -> Node | None:
        try:
            return self._kube.get_node(name)
        except NotFoundError:
            return None
