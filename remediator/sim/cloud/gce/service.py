"""Compute Engine managed instance groups for `sim serve --cloud gce`: the REST subset the
official `google-cloud-compute` client calls to replace a GKE node, with the real JSON shapes and
lifecycle.

Each pool is a zonal MIG whose instances are the pool's Nodes (providerID
`gce://PROJECT/ZONE/NAME`; GKE names a node after its instance). `recreateInstances` behaves as
GCE does: the operation is DONE as soon as the MIG accepts the request (a `requestId` seen before
returns the same operation), and the work shows in each managed instance's `currentAction`:
RECREATING (the old VM and its Node go), then CREATING, then NONE with `instanceStatus` RUNNING
once the new VM's Node — same name — registers (Ready after the provision delay).

Faults (`POST /_sim/faults`): `{"type": "throttle", "count": N}` answers the next N calls 429
`rateLimitExceeded` (`throttle_instances`: the next N instances.get/list/performMaintenance
calls instead); `{"type": "capacity", "count": N}` leaves the next N recreated instances
CREATING with a `ZONE_RESOURCE_POOL_EXHAUSTED` last attempt; `{"type": "never_ready", "count": N}`
registers their Nodes but never Ready.

`instances.reset` power-cycles one VM: a zonal Operation of type "reset" answers RUNNING (a
`requestId` seen before returns the same operation and resets nothing), the VM's Node goes
NotReady for the reboot time and comes back with a new boot id, and the operation reads DONE.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from remediator.sim.cloud.nodepool import pool_template
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import SimCluster

PROJECT = "sim-project"
ZONE = "sim-central1-a"
BASE = "https://www.googleapis.com/compute/v1"
NEVER = 10.0**9
CAPACITY_ERROR = {
    "code": "ZONE_RESOURCE_POOL_EXHAUSTED",
    "message": f"The zone 'projects/{PROJECT}/zones/{ZONE}' does not have enough resources "
    "available to fulfill the request. Try a different zone, or try again later.",
}


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds")


def zone_url(zone: str) -> str:
    return f"{BASE}/projects/{PROJECT}/zones/{zone}"


@dataclass
class Instance:
    name: str
    igm: str
    id: int
    status: str = "RUNNING"
    action: str = "NONE"
    due: datetime | None = None  # when the current action moves on
    last_error: dict[str, str] | None = None


@dataclass
class GceFaults:
    throttle: int = 0
    # The maintenance calls' own (maintenance.py): the controller polls instances.list every
    # cycle, which must not eat a `throttle` meant for the provider's calls.
    throttle_instances: int = 0
    capacity: int = 0
    never_ready: int = 0


@dataclass
class SimGce:
    cluster: SimCluster
    provision_delay: float
    faults: GceFaults = field(default_factory=GceFaults)
    instances: dict[str, Instance] = field(default_factory=dict)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_request: dict[str, str] = field(default_factory=dict)
    templates: dict[str, tuple[dict[str, str], int]] = field(default_factory=dict)
    reboot: Callable[[str], None] | None = None  # power-cycles a node: what a reset does
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(4_000_000_001))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bootstrap(self) -> None:
        store = self.cluster.store
        for pool, names in self.cluster.pools().items():
            nodes = [n for n in (store.find("nodes", "", name) for name in names) if n]
            template = pool_template(nodes)
            self.templates[pool] = (template.labels, template.gpus)
            for name in names:
                self.instances[name] = Instance(name, pool, next(self._ids))
                self._wear(name)

    def _wear(self, node: str) -> None:
        # GKE writes the instance's numeric id on its Node: the providerID only names it, and a
        # recreated instance keeps the name but not the id (the hardware ledger tells them so).
        instance_id = str(self.instances[node].id)

        def change(obj: Obj) -> None:
            obj["spec"]["providerID"] = f"gce://{PROJECT}/{ZONE}/{node}"
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations["container.googleapis.com/instance_id"] = instance_id
            labels = obj["metadata"].setdefault("labels", {})
            labels["topology.kubernetes.io/zone"] = ZONE
            labels["cloud.google.com/gke-nodepool"] = labels.get("simcloud.io/nodepool", "")

        self.cluster.store.mutate("nodes", "", node, change)

    # -- the REST answers --------------------------------------------------------------------

    def _igm_json(self, igm: str) -> dict[str, Any]:
        members = [i for i in self.instances.values() if i.igm == igm]
        actions = {a: 0 for a in ("none", "creating", "recreating", "deleting", "verifying")}
        for i in members:
            actions[i.action.lower()] = actions.get(i.action.lower(), 0) + 1
        return {
            "kind": "compute#instanceGroupManager",
            "id": str(abs(hash(igm)) % 10**18),
            "name": igm,
            "zone": zone_url(ZONE),
            "baseInstanceName": igm,
            "instanceGroup": f"{zone_url(ZONE)}/instanceGroups/{igm}",
            "targetSize": len(members),
            "currentActions": actions,
            "status": {"isStable": all(i.action == "NONE" for i in members)},
            "selfLink": f"{zone_url(ZONE)}/instanceGroupManagers/{igm}",
        }

    def _managed_json(self, i: Instance) -> dict[str, Any]:
        out: dict[str, Any] = {
            "instance": f"{zone_url(ZONE)}/instances/{i.name}",
            "id": str(i.id),
            "currentAction": i.action,
        }
        if i.status:
            out["instanceStatus"] = i.status
        if i.last_error:
            out["lastAttempt"] = {"errors": {"errors": [dict(i.last_error)]}}
        return out

    def get_igm(self, igm: str) -> dict[str, Any] | None:
        with self._lock:
            if not any(i.igm == igm for i in self.instances.values()):
                return None
            return self._igm_json(igm)

    def list_managed(self, igm: str) -> dict[str, Any]:
        with self._lock:
            return {
                "managedInstances": [
                    self._managed_json(i) for i in self.instances.values() if i.igm == igm
                ]
            }

    def recreate(self, igm: str, names: list[str], request_id: str | None) -> dict[str, Any]:
        now = datetime.now(UTC)
        with self._lock:
            if request_id and request_id in self.by_request:
                return self.ops[self.by_request[request_id]]
            targets = [self.instances.get(n) for n in names]
            if any(t is None or t.igm != igm for t in targets):
                raise KeyError(", ".join(names))
            for target in targets:
                if target is not None and target.action == "NONE":
                    target.action, target.status, target.due = "RECREATING", "STOPPING", now
            name = f"operation-{int(now.timestamp() * 1000)}-{uuid.uuid4().hex[:12]}"
            op = {
                "kind": "compute#operation",
                "id": str(next(self._ids)),
                "name": name,
                "zone": zone_url(ZONE),
                "operationType": "compute.instanceGroupManagers.recreateInstances",
                "targetLink": f"{zone_url(ZONE)}/instanceGroupManagers/{igm}",
                "targetId": str(abs(hash(igm)) % 10**18),
                "status": "DONE",
                "user": "anonymous",
                "progress": 100,
                "insertTime": rfc3339(now),
                "startTime": rfc3339(now),
                "endTime": rfc3339(now),
                "selfLink": f"{zone_url(ZONE)}/operations/{name}",
            }
            self.ops[name] = op
            if request_id:
                self.by_request[request_id] = name
            return op

    def reset(self, name: str, request_id: str | None) -> dict[str, Any] | None:
        """Power-cycle a RUNNING instance once per requestId; None when there is no such VM,
        ValueError when it is not running (GCE: `resourceNotReady`)."""
        now = datetime.now(UTC)
        with self._lock:
            if request_id and request_id in self.by_request:
                return dict(self.ops[self.by_request[request_id]])
            target = self.instances.get(name)
            if target is None or self.reboot is None:
                return None
            if target.status != "RUNNING":
                raise ValueError(f"instance {name} is {target.status}")
            op = self.begin_instance_operation("reset", name, str(target.id), request_id, now)
            answer = dict(op)
        self.reboot(name)
        self.finish_operation(op)
        return answer

    def begin_instance_operation(
        self, kind: str, name: str, target_id: str, request_id: str | None, now: datetime
    ) -> dict[str, Any]:
        """A RUNNING zonal operation on instance `name`, recorded (and by its requestId);
        the caller holds the lock and finishes it once the work is done."""
        op_name = f"operation-{int(now.timestamp() * 1000)}-{uuid.uuid4().hex[:12]}"
        op: dict[str, Any] = {
            "kind": "compute#operation",
            "id": str(next(self._ids)),
            "name": op_name,
            "zone": zone_url(ZONE),
            "operationType": kind,
            "targetLink": f"{zone_url(ZONE)}/instances/{name}",
            "targetId": target_id,
            "status": "RUNNING",
            "user": "anonymous",
            "progress": 0,
            "insertTime": rfc3339(now),
            "startTime": rfc3339(now),
            "selfLink": f"{zone_url(ZONE)}/operations/{op_name}",
        }
        self.ops[op_name] = op
        if request_id:
            self.by_request[request_id] = op_name
        return op

    def finish_operation(self, op: dict[str, Any]) -> None:
        with self._lock:
            op.update(status="DONE", progress=100, endTime=rfc3339(datetime.now(UTC)))

    def operation(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self.ops.get(name)

    # -- the MIG's work, on the cluster's tick ------------------------------------------------

    def tick(self, now: datetime) -> None:
        with self._lock:
            due = [i for i in self.instances.values() if i.due is not None and i.due <= now]
        for inst in due:
            if inst.action == "RECREATING":
                if self.cluster.store.find("nodes", "", inst.name) is not None:
                    self.cluster.remove_node(inst.name)
                with self._lock:
                    inst.action, inst.status = "CREATING", "PROVISIONING"
                    inst.due = now + timedelta(seconds=self.provision_delay)
                    if self.faults.capacity > 0:
                        self.faults.capacity -= 1
                        inst.last_error, inst.due = dict(CAPACITY_ERROR), None
            elif inst.action == "CREATING":
                labels, gpus = self.templates.get(inst.igm, ({}, 0))
                with self._lock:
                    delay = 0.0
                    if self.faults.never_ready > 0:
                        self.faults.never_ready -= 1
                        delay = NEVER
                    inst.action, inst.status, inst.due = "NONE", "RUNNING", None
                    inst.id = next(self._ids)
                self.cluster.add_node(
                    inst.name, inst.igm, gpus, labels=dict(labels), ready_after=delay
                )
                self._wear(inst.name)


def _error(status: int, reason: str, message: str, code: str) -> JSONResponse:
    domain = "usageLimits" if status == 429 else "global"
    body = {
        "error": {
            "code": status,
            "message": message,
            "errors": [{"message": message, "domain": domain, "reason": reason}],
            "status": code,
        }
    }
    return JSONResponse(body, status_code=status)


def build_gce_app(gce: SimGce, extra: Sequence[Route] = ()) -> Starlette:
    """`extra`: more of the API, served beside these (maintenance.py)."""
    prefix = "/compute/v1/projects/{project}/zones/{zone}"

    def throttled() -> Response | None:
        with gce._lock:
            if gce.faults.throttle > 0:
                gce.faults.throttle -= 1
                return _error(429, "rateLimitExceeded", "Rate Limit Exceeded", "RESOURCE_EXHAUSTED")
        return None

    def missing(what: str) -> JSONResponse:
        return _error(404, "notFound", f"The resource '{what}' was not found", "NOT_FOUND")

    async def get_igm(request: Request) -> Response:
        igm = request.path_params["igm"]
        found = gce.get_igm(igm)
        if found is None:
            return missing(f"projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{igm}")
        return throttled() or JSONResponse(found)

    async def list_managed(request: Request) -> Response:
        igm = request.path_params["igm"]
        if gce.get_igm(igm) is None:
            return missing(f"projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{igm}")
        return throttled() or JSONResponse(gce.list_managed(igm))

    async def recreate(request: Request) -> Response:
        throttle = throttled()
        if throttle:
            return throttle
        body = await request.json()
        names = [str(url).rsplit("/", 1)[-1] for url in body.get("instances") or ()]
        try:
            op = gce.recreate(
                request.path_params["igm"], names, request.query_params.get("requestId")
            )
        except KeyError as exc:
            return _error(400, "invalid", f"Instances not in the group: {exc}", "INVALID_ARGUMENT")
        return JSONResponse(op)

    async def reset(request: Request) -> Response:
        throttle = throttled()
        if throttle:
            return throttle
        name = request.path_params["instance"]
        try:
            op = gce.reset(name, request.query_params.get("requestId"))
        except ValueError as exc:
            return _error(
                400, "resourceNotReady", f"The resource is not ready: {exc}", "FAILED_PRECONDITION"
            )
        if op is None:
            return missing(f"projects/{PROJECT}/zones/{ZONE}/instances/{name}")
        return JSONResponse(op)

    async def get_operation(request: Request) -> Response:
        name = request.path_params["op"]
        op = gce.operation(name)
        if op is None:
            return missing(f"projects/{PROJECT}/zones/{ZONE}/operations/{name}")
        return throttled() or JSONResponse(op)

    async def list_operations(request: Request) -> Response:
        with gce._lock:
            items = list(gce.ops.values())
        return throttled() or JSONResponse(
            {
                "kind": "compute#operationList",
                "id": f"projects/{PROJECT}/zones/{ZONE}/operations",
                "items": items,
                "selfLink": f"{zone_url(ZONE)}/operations",
            }
        )

    async def faults(request: Request) -> Response:
        body = await request.json()
        kind, count = body.get("type"), int(body.get("count", 1))
        if kind not in ("throttle", "capacity", "never_ready", "throttle_instances"):
            return JSONResponse({"error": f"unknown fault {kind!r}"}, status_code=400)
        with gce._lock:
            setattr(gce.faults, kind, count)
        return JSONResponse({"ok": True, "fault": {"type": kind, "count": count}})

    return Starlette(
        routes=[
            Route(f"{prefix}/instanceGroupManagers/{{igm}}", get_igm, methods=["GET"]),
            Route(
                f"{prefix}/instanceGroupManagers/{{igm}}/listManagedInstances",
                list_managed,
                methods=["POST"],
            ),
            Route(
                f"{prefix}/instanceGroupManagers/{{igm}}/recreateInstances",
                recreate,
                methods=["POST"],
            ),
            Route(f"{prefix}/instances/{{instance}}/reset", reset, methods=["POST"]),
            Route(f"{prefix}/operations", list_operations, methods=["GET"]),
            Route(f"{prefix}/operations/{{op}}", get_operation, methods=["GET"]),
            Route(f"{prefix}/operations/{{op}}/wait", get_operation, methods=["POST"]),
            Route("/_sim/faults", faults, methods=["POST"]),
            *extra,
        ]
    )
