"""Cluster API Machines as node pools: replacing a node is deleting its Machine, and the
MachineSet that owns it creates the new one.

The Node names its Machine (`cluster.x-k8s.io/machine`, namespace in
`cluster.x-k8s.io/cluster-namespace`). Before deleting, the request is recorded twice: our key on
the Machine, and on the owning MachineSet an annotation `replacement.remediator.io/<hash of key>`
naming the Machine and the request time. The MachineSet outlives the Machine, so after a crash the
same key finds the same operation even once the Machine is gone; a Machine already being deleted
is never deleted again. The new Machine is the MachineSet's first Machine created at or after the
request, claimed with `remediator.io/replaces`; the operation succeeds once its `status.nodeRef`
Node is Ready, and fails when that Machine failed (`status.failureReason`/`failureMessage`, phase
Failed: e.g. the infrastructure provider found no capacity) or no Ready Node came in time.
Machines opted out of remediation are held with the reason; a control-plane Machine is never
deleted.

Pauses, as Cluster API reads them (`IsPaused`: the owning Cluster's `spec.paused`, or the object's
own `cluster.x-k8s.io/paused` annotation unless its value is "false"): a paused Cluster (what
`clusterctl move` sets) or a paused Machine or MachineSet stops the controllers a replacement
needs, so the request is held (ReplacementPaused) naming the paused object and how it was paused.
A paused MachineDeployment (`spec.paused`, as `clusterctl alpha rollout pause` sets it, or the
annotation) would not stop its MachineSet, but a human paused that pool: it is held too, naming
it. A pause ends without us, so the step asks again each poll and goes ahead once it has.

Operation ids are `<namespace>/<machineset>/<old machine>`.

Cluster API has no reboot verb. Where the infrastructure provider honours a reboot annotation
(`reboot_annotation`, e.g. Metal3's `reboot.metal3.io` on a BareMetalHost), reboot sets it on the
Machine in one patch with our key: a repeated key finds the key there and never asks again. The
infrastructure provider power-cycles the host and removes its annotation; the key stays as the
record. Without the setting, or on a paused Machine, RebootUnsupported: a Job reboots the host.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from remediator.clock import utcnow
from remediator.errors import NotFoundError, PermanentError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node, parse_time
from remediator.providers.base import (
    Operation,
    OperationState,
    RebootReceipt,
    RebootUnsupported,
    ReplacementHeld,
    ReplacementPaused,
)
from remediator.providers.replacement import Candidate, choose_replacement
from remediator.settings import ClusterApiProviderSettings

GV = "cluster.x-k8s.io/v1beta1"
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
PAUSED = "cluster.x-k8s.io/paused"
SKIP_REMEDIATION = "cluster.x-k8s.io/skip-remediation"
CONTROL_PLANE = "cluster.x-k8s.io/control-plane"
SET_LABEL = "cluster.x-k8s.io/set-name"
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
KEY_ANNOTATION = "remediator.io/remediation-key"
REPLACES = "remediator.io/replaces"
RECORD_PREFIX = "replacement.remediator.io/"
REBOOT_KEY_ANNOTATION = "remediator.io/reboot-key"
REBOOT_AT_ANNOTATION = "remediator.io/reboot-requested-at"

JSON = dict[str, Any]


def record_key(idempotency_key: str) -> str:
    """An annotation key for one request (annotation names allow 63 characters)."""
    return RECORD_PREFIX + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


def _named(obj: Mapping[str, Any], kind: str) -> str:
    return f"{obj.get('kind') or kind} {_meta(obj).get('namespace')}/{_meta(obj).get('name')}"


def paused_by(obj: Mapping[str, Any]) -> str | None:
    """How `obj` is paused, in Cluster API's own terms; None when it is not."""
    if (obj.get("spec") or {}).get("paused") is True:
        return "spec.paused"
    value = _annotations(obj).get(PAUSED)
    if value is not None and value != "false":
        return f"annotation {PAUSED}"
    return None


def refusal(
    machine: Mapping[str, Any],
    owners: Sequence[Mapping[str, Any]],
    cluster: Mapping[str, Any] | None = None,
) -> Exception | None:
    """Why this Machine must not be deleted now; None when it may be. `owners` are its
    MachineSet and MachineDeployment, `cluster` the Cluster it belongs to."""
    name = _named(machine, "Machine")
    if CONTROL_PLANE in (_meta(machine).get("labels") or {}):
        return PermanentError(f"{name} is a control-plane Machine: remediator never deletes one")
    if cluster is not None and (cluster.get("spec") or {}).get("paused") is True:
        return ReplacementPaused(
            f"{name}: {_named(cluster, 'Cluster')} is paused (spec.paused, as clusterctl move "
            "sets it): Cluster API's controllers are not reconciling it, so a deleted Machine "
            "would not be replaced"
        )
    for obj in (machine, *owners):
        how = paused_by(obj)
        if how is None:
            continue
        if obj.get("kind") == "MachineDeployment":
            return ReplacementPaused(
                f"{name}: {_named(obj, 'MachineDeployment')} is paused ({how}): its pool was "
                "paused by hand, so remediator replaces none of its Machines until it is resumed"
            )
        return ReplacementPaused(
            f"{name}: {_named(obj, 'object')} is paused ({how}): Cluster API is not reconciling "
            "it, so a deleted Machine would not be replaced"
        )
    if SKIP_REMEDIATION in _annotations(machine):
        return ReplacementHeld(f"{name} is opted out of remediation ({SKIP_REMEDIATION})")
    return None


def max_surge(deployment: Mapping[str, Any]) -> int | None:
    """The MachineDeployment's maxSurge as a count (a percentage of replicas rounds up)."""
    spec = deployment.get("spec") or {}
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    surge = rolling.get("maxSurge")
    if surge is None:
        return None
    if isinstance(surge, str) and surge.endswith("%"):
        return math.ceil(int(spec.get("replicas") or 0) * int(surge[:-1]) / 100)
    return int(surge)


def machine_failure(name: str, status: Mapping[str, Any]) -> str | None:
    """Why a Machine failed for good, as Cluster API reports it (`failureReason` and
    `failureMessage`, phase Failed); None while it has not."""
    reason = status.get("failureReason")
    message = status.get("failureMessage")
    if not reason and not message and status.get("phase") != "Failed":
        return None
    return f"{reason or 'Failed'}: Machine {name} failed: {message or 'phase Failed'}"


class ClusterApiProvider:
    def __init__(
        self,
        kube: KubeClient,
        *,
        deployments: Mapping[str, str] | None = None,
        launch_timeout: float = 900.0,
        now: Callable[[], datetime] = utcnow,
        reboot_annotation: str | None = None,
    ) -> None:
        self._kube = kube
        self._reboot_annotation = reboot_annotation
        self._deployments = dict(deployments or {})
        self._launch_timeout = launch_timeout
        self._now = now

    @classmethod
    def from_settings(
        cls, settings: ClusterApiProviderSettings, kube: KubeClient
    ) -> ClusterApiProvider:
        return cls(
            kube,
            deployments=settings.deployments,
            launch_timeout=settings.launch_timeout_seconds,
            reboot_annotation=settings.reboot_annotation,
        )

    # -- reading -----------------------------------------------------------------------------

    def _get(self, plural: str, namespace: str, name: str) -> JSON | None:
        try:
            return self._kube.get_custom(GV, plural, namespace, name)
        except NotFoundError:
            return None

    def _owner(self, obj: Mapping[str, Any], kind: str) -> str | None:
        for ref in _meta(obj).get("ownerReferences") or ():
            if ref.get("kind") == kind:
                return str(ref.get("name"))
        return None

    def _cluster(self, machine: Mapping[str, Any], namespace: str) -> tuple[str, JSON | None]:
        """The name of the Cluster the Machine belongs to (`spec.clusterName`, as Cluster API
        finds it) and the Cluster, None when it does not exist."""
        cluster = (machine.get("spec") or {}).get("clusterName") or (
            _meta(machine).get("labels") or {}
        ).get(CLUSTER_LABEL)
        if not cluster:
            return "(none)", None
        return str(cluster), self._get("clusters", namespace, str(cluster))

    def _cluster_of(self, machine: Mapping[str, Any], namespace: str, name: str) -> JSON:
        """Without its Cluster no Cluster API controller reconciles a Machine: nothing would
        replace it."""
        cluster, found = self._cluster(machine, namespace)
        if found is None:
            raise ReplacementHeld(
                f"Machine {namespace}/{name}: its Cluster {namespace}/{cluster} does not exist, "
                "so Cluster API would not replace a deleted Machine"
            )
        return found

    def _recorded(self, idempotency_key: str) -> tuple[str, str, str] | None:
        """(namespace, machineset, machine) of a request already recorded under this key."""
        key = record_key(idempotency_key)
        for ms in self._kube.list_custom(GV, "machinesets"):
            value = _annotations(ms).get(key)
            if value:
                return (
                    str(_meta(ms).get("namespace")),
                    str(_meta(ms).get("name")),
                    json.loads(value)["machine"],
                )
        return None

    # -- the protocol ------------------------------------------------------------------------

    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        found = self._recorded(idempotency_key)
        if found is None:
            found = self._start(node, idempotency_key)
        namespace, machineset, old = found
        machine = self._get("machines", namespace, old)
        if machine is not None and not _meta(machine).get("deletionTimestamp"):
            # Recorded but not yet deleted (a crash or a failed call in between): delete it now.
            self._kube.delete_custom(GV, "machines", namespace, old, uid=_meta(machine).get("uid"))
        return self.get_operation(f"{namespace}/{machineset}/{old}")

    def _start(self, node: str, idempotency_key: str) -> tuple[str, str, str]:
        annotations = self._kube.get_node(node).annotations
        name = annotations.get(MACHINE_ANNOTATION)
        if not name:
            raise PermanentError(f"node {node} has no {MACHINE_ANNOTATION} annotation")
        namespace = annotations.get(NAMESPACE_ANNOTATION, "default")
        machine = self._get("machines", namespace, name)
        if machine is None:
            raise NotFoundError(f"Machine {namespace}/{name} of node {node} does not exist")
        machineset = self._owner(machine, "MachineSet")
        ms = self._get("machinesets", namespace, machineset) if machineset else None
        owners = [ms] if ms else []
        deployment = self._owner(ms, "MachineDeployment") if ms else None
        md = self._get("machinedeployments", namespace, deployment) if deployment else None
        owners += [md] if md else []
        problem = refusal(machine, owners, self._cluster_of(machine, namespace, name))
        if problem is not None:
            raise problem
        if machineset is None or ms is None:
            raise PermanentError(
                f"Machine {namespace}/{name} has no MachineSet: deleting it would not replace it"
            )
        requested = self._now().astimezone(UTC).replace(microsecond=0).isoformat()
        self._kube.patch_custom(
            GV,
            "machines",
            namespace,
            name,
            {"metadata": {"annotations": {KEY_ANNOTATION: idempotency_key}}},
        )
        record = json.dumps(
            {
                "machine": name,
                "requested_at": requested,
                "node": node,
                "present": self._same_second(namespace, machineset, requested),
            }
        )
        self._kube.patch_custom(
            GV,
            "machinesets",
            namespace,
            machineset,
            {"metadata": {"annotations": {record_key(idempotency_key): record}}},
        )
        return namespace, machineset, name

    def _same_second(self, namespace: str, machineset: str, requested: str) -> list[str]:
        """Machines already there yet created in the request's second: creationTimestamp has
        one-second resolution, so only their names tell them from the replacement."""
        since = datetime.fromisoformat(requested)
        machines = self._kube.list_custom(
            GV, "machines", namespace, label_selector=f"{SET_LABEL}={machineset}"
        )
        return sorted(
            str(_meta(m).get("name"))
            for m in machines
            if (parse_time(_meta(m).get("creationTimestamp")) or since) >= since
        )

    def get_operation(self, op_id: str) -> Operation:
        parts = op_id.split("/")
        if len(parts) != 3 or not all(parts):
            raise PermanentError(f"{op_id!r} is not a Cluster API replacement id (NS/SET/MACHINE)")
        namespace, machineset, old = parts
        ms = self._get("machinesets", namespace, machineset)
        if ms is None:
            raise NotFoundError(f"MachineSet {namespace}/{machineset} of {op_id} does not exist")
        records = [
            json.loads(v) for k, v in _annotations(ms).items() if k.startswith(RECORD_PREFIX)
        ]
        mine = next((r for r in records if r.get("machine") == old), None)
        if mine is None:
            raise NotFoundError(
                f"MachineSet {namespace}/{machineset} records no replacement of {old}"
            )
        requested_at = datetime.fromisoformat(mine["requested_at"])
        machines = self._kube.list_custom(
            GV, "machines", namespace, label_selector=f"{SET_LABEL}={machineset}"
        )
        candidates = [
            Candidate(
                str(_meta(m).get("name")),
                parse_time(_meta(m).get("creationTimestamp")) or requested_at,
                _annotations(m).get(REPLACES),
            )
            for m in machines
            if _meta(m).get("name") not in {old, *mine.get("present", ())}
            and not _meta(m).get("deletionTimestamp")
        ]
        chosen = choose_replacement(old, requested_at, candidates)
        base: dict[str, Any] = {"id": op_id, "pool": machineset, "node": str(mine.get("node", old))}
        detail = {"machine_set": f"{namespace}/{machineset}", "old_machine": old}
        if chosen is None:
            return self._waiting(base, detail, requested_at, "no new Machine created")
        if chosen.claimed_for is None:
            self._kube.patch_custom(
                GV,
                "machines",
                namespace,
                chosen.instance_id,
                {"metadata": {"annotations": {REPLACES: old}}},
            )
        detail["new_machine"] = chosen.instance_id
        by_name = {str(_meta(m).get("name")): m for m in machines}
        status = (by_name.get(chosen.instance_id) or {}).get("status") or {}
        failure = machine_failure(chosen.instance_id, status)
        if failure is not None:
            return Operation(**base, state=OperationState.FAILED, error=failure, detail=detail)
        ref = status.get("nodeRef") or {}
        node = self._node(str(ref["name"])) if ref.get("name") else None
        if node is not None and node.ready:
            return Operation(
                **base, state=OperationState.SUCCEEDED, new_node=node.name, detail=detail
            )
        where = f"node {node.name} not Ready" if node else "no node yet"
        return self._waiting(
            {**base, "new_node": node.name if node else None},
            detail,
            chosen.launched_at,
            f"Machine {chosen.instance_id}: {where}",
        )

    def _waiting(
        self, base: dict[str, Any], detail: dict[str, str], since: datetime, what: str
    ) -> Operation:
        if (self._now() - since).total_seconds() > self._launch_timeout:
            error = f"launch_timeout: {what} within {self._launch_timeout:.0f}s"
            return Operation(**base, state=OperationState.FAILED, error=error, detail=detail)
        return Operation(**base, state=OperationState.PROVISIONING, detail=detail)

    def _node(self, name: str) -> Node | None:
        try:
            return self._kube.get_node(name)
        except NotFoundError:
            return None

    def spare_capacity(self, pool: str) -> int | None:
        where = self._deployments.get(pool)
        if where:
            namespace, _, name = where.partition("/")
            found = [self._get("machinedeployments", namespace, name)]
        else:
            found = [
                md
                for md in self._kube.list_custom(GV, "machinedeployments")
                if _meta(md).get("name") == pool
            ]
        surge = max_surge(found[0]) if found and found[0] else None
        return surge if surge else None

    def reboot(self, pool: str, node: str, idempotency_key: str, reason: str) -> RebootReceipt:
        """The reboot annotation on the node's Machine, once per key (module docstring)."""
        annotation = self._reboot_annotation
        if not annotation:
            raise RebootUnsupported(
                f"Cluster API has no reboot verb and no reboot_annotation is set ({node} in {pool})"
            )
        annotations = self._kube.get_node(node).annotations
        name = annotations.get(MACHINE_ANNOTATION)
        if not name:
            raise PermanentError(f"node {node} has no {MACHINE_ANNOTATION} annotation")
        namespace = annotations.get(NAMESPACE_ANNOTATION, "default")
        machine = self._get("machines", namespace, name)
        if machine is None:
            raise NotFoundError(f"Machine {namespace}/{name} of node {node} does not exist")
        mine = _annotations(machine)
        if mine.get(REBOOT_KEY_ANNOTATION) != idempotency_key:
            how = paused_by(machine)
            if how is None:
                _, cluster = self._cluster(machine, namespace)
                if cluster is not None and (cluster.get("spec") or {}).get("paused") is True:
                    how = f"its {_named(cluster, 'Cluster')} has spec.paused"
            if how is not None:
                raise RebootUnsupported(
                    f"Machine {namespace}/{name} is paused ({how}): no controller would act on "
                    f"{annotation}"
                )
            requested = self._now().astimezone(UTC).replace(microsecond=0).isoformat()
            patch = {annotation: "", REBOOT_KEY_ANNOTATION: idempotency_key}
            patch[REBOOT_AT_ANNOTATION] = requested
            self._kube.patch_custom(
                GV, "machines", namespace, name, {"metadata": {"annotations": patch}}
            )
        else:
            requested = mine.get(REBOOT_AT_ANNOTATION, "")
        return RebootReceipt(
            id=f"{namespace}/{name}/{requested}",
            pool=pool,
            node=node,
            detail={
                "call": "clusterapi:reboot-annotation",
                "machine": name,
                "namespace": namespace,
                "annotation": annotation,
                "requested_at": requested,
            },
        )


# A quarantined machine (docs/ledger.md "Quarantined machines"). Cluster API has no annotation
# for "never reuse this host": a Machine is deleted and its MachineSet makes a new one; reusing
# the hardware behind it is the infrastructure provider's choice. So the hold is ours, on what
# outlives the Machine: the Metal3 BareMetalHost gets the label `remediator.io/machine-hold`,
# which a Metal3MachineTemplate's `hostSelector.matchExpressions` (`DoesNotExist`) keeps from
# being chosen again, and the annotation with the reason; the Machine, while it exists, gets the
# annotation too (and is on its way out: the replacement deletes it).
HOLD_KEY = "remediator.io/machine-hold"
HOLD_REASON = "remediator.io/machine-hold-reason"
METAL3_GV = "metal3.io/v1alpha1"
METAL3_PREFIX = "metal3://"


def metal3_host(provider_id: str) -> tuple[str, str] | None:
    """(namespace, BareMetalHost) from a Metal3 providerID `metal3://NS/HOST/M3MACHINE`."""
    if not provider_id.startswith(METAL3_PREFIX):
        return None
    parts = provider_id[len(METAL3_PREFIX) :].split("/")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


def hold_machine(
    kube: KubeClient,
    node: str,
    provider_id: str,
    machine_annotations: Mapping[str, str],
    reason: str,
) -> list[str]:
    """Mark the quarantined machine where Cluster API and Metal3 keep it; what was marked.
    Objects already gone are skipped (the replaced Machine is deleted by design)."""
    marked: list[str] = []
    patch = {"metadata": {"annotations": {HOLD_KEY: "true", HOLD_REASON: reason[:1000]}}}
    name = machine_annotations.get(MACHINE_ANNOTATION)
    if name:
        namespace = machine_annotations.get(NAMESPACE_ANNOTATION, "default")
        try:
            kube.patch_custom(GV, "machines", namespace, name, patch)
            marked.append(f"Machine {namespace}/{name}")
        except NotFoundError:
            pass
    host = metal3_host(provider_id)
    if host is not None:
        held = {"metadata": {**patch["metadata"], "labels": {HOLD_KEY: "true"}}}
        try:
            kube.patch_custom(METAL3_GV, "baremetalhosts", host[0], host[1], held)
            marked.append(f"BareMetalHost {host[0]}/{host[1]}")
        except NotFoundError:
            pass
    return marked
