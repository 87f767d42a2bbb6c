"""Fault injection for the simulated cluster: over HTTP (the inject app) and from the command line.

`POST /v1/faults` breaks a node the way hardware breaks: an XID on a GPU, a GPU overheating, an
NVLink error burst, an InfiniBand link down or symbol errors, a node condition, a GPU gone from
the node, a pod's containers crash-looping or failing readiness (`container`, as the kubelet
reports them: the node agent's pod, say); `clear` repairs it. The telemetry shows it at the next
scrape, and the Node object changes where a real cluster's would (conditions; allocatable GPUs
when one is lost).
A degraded NVLink fabric (`nvlink_slow`, a bandwidth fraction) and a driver or VBIOS that differs
from the pool's (`versions`) change the machine's hardware profile (sim/node/hardware.py), which
the host programs report (a driver change also relabels the Node, as GPU feature discovery
would: sim/node/gfd.py); they survive a reboot, as the real faults do, until `clear`.
`GET /v1/hardware` shows each machine's profile (GPU UUIDs, serials, versions, HCAs).
`POST /v1/nodepool-faults` makes the cloud's node-pool API misbehave (and, with `doa_next`, makes
a pool's next new machine arrive broken, whichever cloud adds it), `POST /v1/kube-faults` the
Kubernetes API (sim/kube/api/faults.py), whose every request `GET /v1/kube-requests` lists and
counts (and `GET /v1/kube-forbidden` the ones its RBAC refused). All answer what was done, or
400/404 with the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal, Protocol

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from remediator.errors import validation_message
from remediator.sim.cloud.nodepool import NodePoolError, NodePoolService, error_response
from remediator.sim.faults.racks import RACK_FAULT, RackFault, RackFaults, is_rack_fault
from remediator.sim.kube.api.faults import KUBE_FAULT, KubeFaults
from remediator.sim.kube.api.kobj import GPU_RESOURCE
from remediator.sim.kube.api.store import ApiError, Obj, ObjectStore
from remediator.sim.node.gfd import PREFIX, version_labels
from remediator.sim.rack.fabric import UnknownRack
from remediator.sim.telemetry.exporters import XID_OFF_BUS, Telemetry, UnknownNode, xid_message

CONDITION_STATUSES = ("True", "False", "Unknown")


class _Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str = Field(min_length=1, max_length=253)


class XidFault(_Fault):
    """`persistent`: a GPU reset or a reboot does not clear it (broken hardware); otherwise
    either does (a transient fault)."""

    type: Literal["xid"]
    gpu: int = Field(ge=0)
    code: int = Field(ge=1, le=1023)
    persistent: bool = False


class TemperatureFault(_Fault):
    """Without `gpu`, every GPU of the node heats up: the node's cooling failed."""

    type: Literal["temperature"]
    gpu: int | None = Field(default=None, ge=0)
    celsius: float = Field(ge=0, le=130)
    rate: float = Field(default=1.0, gt=0, le=100, description="°C per second")


class NvlinkFault(_Fault):
    type: Literal["nvlink_errors"]
    gpu: int = Field(ge=0)
    count: int = Field(ge=1, le=10**9)


class IbLinkDownFault(_Fault):
    type: Literal["ib_link_down"]
    device: str = "mlx5_0"


class IbSymbolFault(_Fault):
    type: Literal["ib_symbol_errors"]
    device: str = "mlx5_0"
    count: int = Field(ge=1, le=10**9)


class ConditionFault(_Fault):
    type: Literal["condition"]
    condition: str = Field(min_length=1, max_length=316, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_./]*$")
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="FaultInjected", pattern=r"^[A-Za-z][A-Za-z0-9_,:]*$")
    message: str = "injected by the simulator"


class GpuMissingFault(_Fault):
    type: Literal["gpu_missing"]
    gpu: int = Field(ge=0)
    persistent: bool = False


class NvlinkSlowFault(_Fault):
    """The node's NVLink fabric carries only `fraction` of its bandwidth (a degraded link or
    NVSwitch): all_reduce_perf's bus bandwidth drops with it. Hardware: a reboot keeps it."""

    type: Literal["nvlink_slow"]
    fraction: float = Field(gt=0, le=1)


class VersionsFault(_Fault):
    """The machine runs a driver (and so a CUDA version) or a VBIOS other than the pool's. Given a
    driver without a CUDA version, the CUDA version is the one that driver branch ships."""

    type: Literal["versions"]
    driver_version: str | None = Field(
        default=None, pattern=r"^\d{3}\.\d{1,3}(\.\d{1,3})?$", max_length=16
    )
    cuda_version: str | None = Field(default=None, pattern=r"^\d{2}\.\d$", max_length=8)
    vbios_version: str | None = Field(
        default=None, pattern=r"^[0-9A-Fa-f]{2}(\.[0-9A-Fa-f]{2}){4}$", max_length=16
    )

    @model_validator(mode="after")
    def _something(self) -> VersionsFault:
        if not (self.driver_version or self.cuda_version or self.vbios_version):
            raise ValueError("give driver_version, cuda_version or vbios_version")
        return self


class RowRemapPendingFault(_Fault):
    """A row remap waiting for a GPU reset (DCGM_FI_DEV_ROW_REMAP_PENDING=1); a reset or a
    reboot clears it."""

    type: Literal["row_remap_pending"]
    gpu: int = Field(ge=0)


class ContainerFault(_Fault):
    """The containers of the node's pods that `selector` picks misbehave, reported as the
    kubelet reports it: `crash` exits with an error after each start and is restarted with the
    kubelet's back-off (restartCount, CrashLoopBackOff); `unready` runs but fails readiness;
    `none` ends it. `clear` of the node ends it too."""

    type: Literal["container"]
    selector: str = Field(min_length=1, max_length=1024)
    behaviour: Literal["crash", "unready", "none"]


class ClearFault(_Fault):
    """Without `gpu`, the whole node: GPUs, links and injected conditions."""

    type: Literal["clear"]
    gpu: int | None = Field(default=None, ge=0)


Fault = Annotated[
    XidFault
    | TemperatureFault
    | NvlinkFault
    | IbLinkDownFault
    | IbSymbolFault
    | ConditionFault
    | GpuMissingFault
    | NvlinkSlowFault
    | VersionsFault
    | RowRemapPendingFault
    | ContainerFault
    | ClearFault,
    Field(discriminator="type"),
]
FAULT = TypeAdapter(Fault)
# Faults of broken hardware: a machine that arrives with one keeps it through resets and reboots.
HARDWARE_FAULTS = frozenset({"xid", "gpu_missing"})


def arrival_fault(raw: Any) -> dict[str, Any]:
    """A node fault without its node, for a machine that does not exist yet: checked as the
    fault it will become; an XID or a missing GPU is persistent unless it says otherwise."""
    if not isinstance(raw, dict):
        raise ValueError('fault must be an object, e.g. {"type": "xid", "gpu": 0, "code": 79}')
    if "node" in raw:
        raise ValueError("fault names no node: it happens to the pool's next new node")
    if raw.get("type") == "clear":
        raise ValueError("a new node cannot arrive with a clear")
    template = dict(raw)
    if template.get("type") in HARDWARE_FAULTS:
        template.setdefault("persistent", True)
    FAULT.validate_python({**template, "node": "new-node"})
    return template


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _RequestRule(_Rule):
    """`method` narrows a rule to requests of one HTTP method (POST: replacements, reboots)."""

    method: Literal["GET", "POST"] | None = None

    def requests(self) -> str:
        return f"node-pool {self.method} requests" if self.method else "node-pool requests"


class ErrorRule(_RequestRule):
    """The next `count` requests answer `status`; with `after_processing` the request takes
    effect first and only its answer is lost, as when a load balancer drops a reply."""

    type: Literal["error"]
    status: Literal[500, 503] = 500
    count: int = Field(default=1, ge=0, le=10_000)
    after_processing: bool = False


class ThrottleRule(_RequestRule):
    type: Literal["throttle"]
    count: int = Field(default=1, ge=0, le=10_000)
    retry_after: int = Field(default=1, ge=0, le=3600)


class DelayRule(_RequestRule):
    type: Literal["delay"]
    count: int = Field(default=1, ge=0, le=10_000)
    seconds: float = Field(gt=0, le=300)


class SpareCapacityRule(_Rule):
    type: Literal["spare_capacity"]
    pool: str = Field(min_length=1)
    spare: int = Field(ge=0, le=100_000)


class FailNextRule(_Rule):
    type: Literal["fail_next"]
    count: int = Field(default=1, ge=1, le=10_000)
    code: str = Field(default="provisioning_failed", min_length=1, max_length=64)
    message: str = "the cloud could not provision a replacement instance"


class DoaNextRule(_Rule):
    """The pool's next `count` new machines arrive dead: each gets `fault` (a node fault without
    its node) the moment it registers, whichever cloud (node-pool API, AWS, Cluster API, GCE)
    provisioned it."""

    type: Literal["doa_next"]
    pool: str = Field(min_length=1, max_length=253)
    fault: dict[str, Any]
    count: int = Field(default=1, ge=1, le=10_000)

    @field_validator("fault", mode="before")
    @classmethod
    def _fault(cls, raw: Any) -> dict[str, Any]:
        try:
            return arrival_fault(raw)
        except ValidationError as exc:
            raise ValueError(validation_message(exc, "fault")) from exc


class ClearRule(_Rule):
    type: Literal["clear"]


NodePoolRule = Annotated[
    ErrorRule
    | ThrottleRule
    | DelayRule
    | SpareCapacityRule
    | FailNextRule
    | DoaNextRule
    | ClearRule,
    Field(discriminator="type"),
]
NODEPOOL_RULE = TypeAdapter(NodePoolRule)


class FaultCluster(Protocol):
    store: ObjectStore

    def pools(self) -> dict[str, list[str]]: ...

    def set_node_condition(
        self, node: str, type: str, status: str, reason: str = "", message: str = ""
    ) -> None: ...

    def set_container_fault(self, node: str, selector: str, behaviour: str | None) -> int: ...

    def clear_container_faults(self, node: str) -> None: ...


class Arrivals(Protocol):
    """The faults new machines arrive with (sim/faults/arrivals.py)."""

    def doa_next(self, pool: str, fault: dict[str, Any], count: int) -> None: ...

    def clear(self) -> None: ...

    def to_json(self) -> dict[str, Any]: ...


class BadFault(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def gpu_range(indices: list[int]) -> str:
    if len(indices) == 1:
        return f"GPU {indices[0]}"
    return f"GPUs {indices[0]}-{indices[-1]}"


def healthy_status(condition: str) -> str:
    return "True" if condition == "Ready" else "False"


class FaultInjector:
    """Applies faults to the telemetry, the Node objects and the node-pool API."""

    def __init__(
        self,
        cluster: FaultCluster,
        telemetry: Telemetry,
        nodepool: NodePoolService,
        on_applied: Callable[[Fault], None] | None = None,
        arrivals: Arrivals | None = None,
    ) -> None:
        self._on_applied = on_applied  # e.g. the node hosts' kernel log and driver files
        self.arrivals = arrivals
        self._cluster = cluster
        self._telemetry = telemetry
        self._nodepool = nodepool
        self._lock = threading.Lock()
        self._conditions: dict[str, dict[str, str]] = {}  # node -> condition -> injected status
        self.racks: RackFaults | None = None  # NVL72 racks' faults (sim/faults/racks.py)

    def apply_rack(self, fault: RackFault) -> str:
        if self.racks is None:
            raise BadFault(400, "no_racks", "this simulator has no racks (--topology nvl72)")
        try:
            return self.racks.apply(fault)
        except UnknownRack as exc:
            raise BadFault(404, "rack_not_found", str(exc)) from exc
        except ValueError as exc:
            raise BadFault(400, "invalid_fault", str(exc)) from exc

    def apply(self, fault: Fault) -> str:
        """Carry out one fault; the sentence that says what was done."""
        node = fault.node
        try:
            self._telemetry.node(node)
        except UnknownNode as exc:
            raise BadFault(404, "node_not_found", f'node "{node}" does not exist') from exc
        try:
            done = self._apply(fault)
        except ValueError as exc:
            raise BadFault(400, "invalid_fault", str(exc)) from exc
        if self._on_applied is not None:
            self._on_applied(fault)
        return done

    def _apply(self, fault: Fault) -> str:
        tel, node = self._telemetry, fault.node
        if isinstance(fault, XidFault):
            tel.xid(node, fault.gpu, fault.code)
            text = f"XID {fault.code} ({xid_message(fault.code)}) on node {node} GPU {fault.gpu}"
            if fault.code == XID_OFF_BUS:
                allocatable = self._sync_allocatable(node)
                text += (
                    "; the GPU is off the bus: only its DCGM_FI_DEV_XID_ERRORS series remains, "
                    f"allocatable {GPU_RESOURCE} is now {allocatable}"
                )
            return text
        if isinstance(fault, TemperatureFault):
            gpus = tel.heat(node, fault.gpu, fault.celsius, fault.rate)
            return (
                f"{gpu_range(gpus)} of node {node} heading to {fault.celsius:g} °C "
                f"at {fault.rate:g} °C/s"
            )
        if isinstance(fault, NvlinkFault):
            tel.nvlink_errors(node, fault.gpu, fault.count)
            return f"NVLink error burst of {fault.count} on node {node} GPU {fault.gpu}"
        if isinstance(fault, IbLinkDownFault):
            tel.ib_link(node, fault.device, up=False)
            return f"InfiniBand link {fault.device} port 1 of node {node} is down"
        if isinstance(fault, IbSymbolFault):
            tel.ib_symbol_errors(node, fault.device, fault.count)
            return f"{fault.count} symbol errors on InfiniBand {fault.device} of node {node}"
        if isinstance(fault, ConditionFault):
            self._set_condition(node, fault.condition, fault.status, fault.reason, fault.message)
            with self._lock:
                self._conditions.setdefault(node, {})[fault.condition] = fault.status
            return f"node {node} condition {fault.condition}={fault.status}"
        if isinstance(fault, GpuMissingFault):
            tel.gpu_missing(node, fault.gpu)
            allocatable = self._sync_allocatable(node)
            return (
                f"GPU {fault.gpu} of node {node} is gone: its series vanished, "
                f"allocatable {GPU_RESOURCE} is now {allocatable}"
            )
        if isinstance(fault, NvlinkSlowFault):
            profile = tel.hardware.slow_nvlink(node, fault.fraction)
            return (
                f"NVLink of node {node} carries {fault.fraction:g} of its bandwidth: "
                f"all-reduce bus bandwidth {profile.nvlink_busbw:g} GB/s"
            )
        if isinstance(fault, VersionsFault):
            profile = tel.hardware.versions(
                node, fault.driver_version, fault.vbios_version, fault.cuda_version
            )
            tel.relabel(node)
            self._sync_versions(node)
            return (
                f"node {node} runs driver {profile.driver_version} (CUDA "
                f"{profile.cuda_version}), VBIOS {profile.vbios_version}"
            )
        if isinstance(fault, RowRemapPendingFault):
            tel.row_remap_pending(node, fault.gpu)
            return f"row remap pending a GPU reset on node {node} GPU {fault.gpu}"
        if isinstance(fault, ContainerFault):
            behaviour = None if fault.behaviour == "none" else fault.behaviour
            try:
                pods = self._cluster.set_container_fault(node, fault.selector, behaviour)
            except ApiError as exc:
                raise BadFault(400, "invalid_fault", exc.message) from exc
            return (
                f"containers of {pods} pod(s) on node {node} ({fault.selector}): {fault.behaviour}"
            )
        tel.clear(node, fault.gpu)
        if fault.gpu is None:
            tel.hardware.repair(node)
            tel.relabel(node)
            self._sync_versions(node)
        allocatable = self._sync_allocatable(node)
        if fault.gpu is not None:
            return f"cleared node {node} GPU {fault.gpu}; allocatable {GPU_RESOURCE} {allocatable}"
        self._cluster.clear_container_faults(node)
        with self._lock:
            injected = self._conditions.pop(node, {})
        for condition in sorted(injected):
            self._set_condition(
                node, condition, healthy_status(condition), "FaultCleared", "cleared by simulator"
            )
        return f"cleared node {node}; allocatable {GPU_RESOURCE} {allocatable}" + (
            f"; conditions reset: {', '.join(sorted(injected))}" if injected else ""
        )

    def _set_condition(self, node: str, condition: str, status: str, reason: str, msg: str) -> None:
        try:
            self._cluster.set_node_condition(node, condition, status, reason, msg)
        except ApiError as exc:
            raise BadFault(exc.code, "node_update_failed", exc.message) from exc

    def _sync_allocatable(self, node: str) -> int:
        """What the device plugin does: GPUs that are gone or off the bus are not allocatable."""
        unhealthy = self._telemetry.unhealthy_gpus(node)
        result = 0

        def change(obj: Obj) -> None:
            nonlocal result
            status = obj.setdefault("status", {})
            capacity = int((status.get("capacity") or {}).get(GPU_RESOURCE, "0"))
            result = max(0, capacity - unhealthy)
            status.setdefault("allocatable", {})[GPU_RESOURCE] = str(result)

        try:
            self._cluster.store.mutate("nodes", "", node, change)
        except ApiError as exc:
            raise BadFault(exc.code, "node_update_failed", exc.message) from exc
        return result

    def _sync_versions(self, node: str) -> None:
        """What GPU feature discovery does when a machine's driver changed: its version labels
        follow (sim/node/gfd.py)."""
        profile = self._telemetry.hardware.current(node)
        if profile is None:
            return
        labels = version_labels(profile.driver_version, profile.cuda_version)

        def change(obj: Obj) -> None:
            meta = obj.setdefault("metadata", {})
            kept = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith(PREFIX)}
            meta["labels"] = {**kept, **labels}

        try:
            self._cluster.store.mutate("nodes", "", node, change)
        except ApiError as exc:
            raise BadFault(exc.code, "node_update_failed", exc.message) from exc

    def active(self) -> list[dict[str, Any]]:
        faults = self._telemetry.active_faults()
        nodes, _ = self._cluster.store.list("nodes")
        for obj in nodes:
            meta = obj.get("metadata") or {}
            profile = self._telemetry.hardware.current(meta.get("name", ""))
            if profile is not None and profile.uid == meta.get("uid"):
                faults.extend(self._telemetry.hardware.faults(profile.node))
        with self._lock:
            for node in sorted(self._conditions):
                if self._cluster.store.find("nodes", "", node) is None:
                    continue
                for condition, status in sorted(self._conditions[node].items()):
                    faults.append(
                        {
                            "node": node,
                            "type": "condition",
                            "condition": condition,
                            "status": status,
                        }
                    )
        if self.racks is not None:
            faults.extend(self.racks.fabric.active())
        return faults

    def hardware(self, node: str | None) -> list[dict[str, Any]]:
        """Each machine's profile and the state of its parts: what the host programs report."""
        if node is not None:
            names = [node]
        else:
            names = sorted(n["metadata"]["name"] for n in self._cluster.store.list("nodes")[0])
        found = []
        for name in names:
            try:
                inventory = self._telemetry.inventory(name)
            except UnknownNode as exc:
                raise BadFault(404, "node_not_found", f'node "{name}" does not exist') from exc
            p = inventory.profile
            found.append(
                {
                    "node": p.node,
                    "machine": p.generation,
                    "model": p.model,
                    "driver_version": p.driver_version,
                    "cuda_version": p.cuda_version,
                    "vbios_version": p.vbios_version,
                    "nvlink_busbw_gbps": p.nvlink_busbw,
                    "gpus": [
                        {
                            "index": g.index,
                            "uuid": g.uuid,
                            "serial": g.serial,
                            "pci_bus_id": g.pci_bus_id,
                            "present": g.index not in inventory.absent_gpus,
                        }
                        for g in p.gpus
                    ],
                    "ib_ports": [
                        {
                            "device": port.device,
                            "port": port.port,
                            "node_guid": port.node_guid,
                            "state": "Down" if port.device in inventory.down_ports else "Active",
                        }
                        for port in p.ib_ports
                    ],
                }
            )
        return found

    def nodepool_faults(self) -> dict[str, Any]:
        arrivals = self.arrivals.to_json() if self.arrivals else {}
        return {**self._nodepool.faults_json(), **arrivals}

    def nodepool_rule(self, rule: NodePoolRule) -> str:
        pool = self._nodepool
        if isinstance(rule, ErrorRule):
            pool.update_faults(
                error_count=rule.count,
                error_status=rule.status,
                error_after_processing=rule.after_processing,
                error_method=rule.method,
            )
            when = "after taking effect" if rule.after_processing else "without taking effect"
            return f"the next {rule.count} {rule.requests()} answer {rule.status} {when}"
        if isinstance(rule, ThrottleRule):
            pool.update_faults(
                throttle_count=rule.count, retry_after=rule.retry_after, throttle_method=rule.method
            )
            return (
                f"the next {rule.count} {rule.requests()} answer 429 "
                f"with Retry-After: {rule.retry_after}"
            )
        if isinstance(rule, DelayRule):
            pool.update_faults(
                delay_count=rule.count, delay_seconds=rule.seconds, delay_method=rule.method
            )
            return f"the next {rule.count} {rule.requests()} are answered {rule.seconds:g}s late"
        if isinstance(rule, SpareCapacityRule):
            try:
                pool.set_spare(rule.pool, rule.spare)
            except NodePoolError as exc:
                raise BadFault(exc.status, exc.code, exc.message) from exc
            return f"node pool {rule.pool} has {rule.spare} spare nodes"
        if isinstance(rule, FailNextRule):
            pool.fail_next(rule.count, rule.code, rule.message)
            return f"the next {rule.count} replacement operations will fail with {rule.code}"
        if isinstance(rule, DoaNextRule):
            if self.arrivals is None:
                raise BadFault(400, "unsupported", "this simulator adds no new machines")
            if rule.pool not in self._cluster.pools():
                raise BadFault(404, "pool_not_found", f'node pool "{rule.pool}" does not exist')
            self.arrivals.doa_next(rule.pool, rule.fault, rule.count)
            what = ", ".join(f"{k}={v}" for k, v in rule.fault.items())
            return f"the next {rule.count} new nodes of pool {rule.pool} arrive with {what}"
        pool.update_faults(error_count=0, throttle_count=0, delay_count=0, fail_next=[])
        if self.arrivals is not None:
            self.arrivals.clear()
        return "node-pool faults cleared"


def _parse(adapter: TypeAdapter[Any], raw: bytes) -> Any:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise BadFault(400, "invalid_json", f"request body is not JSON: {exc}") from exc
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise BadFault(400, "invalid_fault", validation_message(exc)) from exc


def build_inject_app(injector: FaultInjector, kube_faults: KubeFaults) -> Starlette:
    async def post_fault(request: Request) -> Response:
        raw = await request.body()
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if is_rack_fault(data):
            try:
                rack_fault = _parse(RACK_FAULT, raw)
                message = injector.apply_rack(rack_fault)
            except BadFault as err:
                return error_response(err.status, err.code, err.message)
            return JSONResponse({"applied": rack_fault.model_dump(), "message": message})
        try:
            fault = _parse(FAULT, raw)
            message = injector.apply(fault)
        except BadFault as err:
            return error_response(err.status, err.code, err.message)
        return JSONResponse({"applied": fault.model_dump(), "message": message})

    async def list_faults(_request: Request) -> Response:
        return JSONResponse({"faults": injector.active()})

    async def post_nodepool_fault(request: Request) -> Response:
        try:
            rule = _parse(NODEPOOL_RULE, await request.body())
            message = injector.nodepool_rule(rule)
        except BadFault as err:
            return error_response(err.status, err.code, err.message)
        return JSONResponse(
            {"applied": rule.model_dump(), "message": message, "faults": injector.nodepool_faults()}
        )

    async def hardware(request: Request) -> Response:
        try:
            machines = injector.hardware(request.query_params.get("node"))
        except BadFault as err:
            return error_response(err.status, err.code, err.message)
        return JSONResponse({"machines": machines})

    async def list_nodepool_faults(_request: Request) -> Response:
        return JSONResponse({"faults": injector.nodepool_faults()})

    async def post_kube_fault(request: Request) -> Response:
        try:
            fault = _parse(KUBE_FAULT, await request.body())
        except BadFault as err:
            return error_response(err.status, err.code, err.message)
        message = kube_faults.apply(fault)
        return JSONResponse(
            {
                "applied": fault.model_dump(exclude_none=True),
                "message": message,
                "faults": kube_faults.active(),
            }
        )

    async def list_kube_faults(_request: Request) -> Response:
        return JSONResponse({"faults": kube_faults.active()})

    async def kube_requests(request: Request) -> Response:
        raw = request.query_params.get("since", "0")
        if not raw.isdigit():
            return error_response(400, "invalid_since", f"since must be a number, not {raw!r}")
        return JSONResponse(kube_faults.requests(int(raw)))

    async def kube_forbidden(_request: Request) -> Response:
        return JSONResponse({"forbidden": kube_faults.forbidden()})

    async def root(_request: Request) -> Response:
        return JSONResponse(
            {
                "endpoints": [
                    "POST /v1/faults",
                    "GET /v1/faults",
                    "GET /v1/hardware?node=NAME",
                    "POST /v1/nodepool-faults",
                    "GET /v1/nodepool-faults",
                    "POST /v1/kube-faults",
                    "GET /v1/kube-faults",
                    "GET /v1/kube-requests?since=SEQ",
                    "GET /v1/kube-forbidden",
                ]
            }
        )

    async def http_error(_request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code = "method_not_allowed" if status == 405 else "not_found"
        return error_response(status, code, "no such endpoint in the inject API")

    return Starlette(
        routes=[
            Route("/", root),
            Route("/v1/faults", post_fault, methods=["POST"]),
            Route("/v1/faults", list_faults, methods=["GET"]),
            Route("/v1/hardware", hardware, methods=["GET"]),
            Route("/v1/nodepool-faults", post_nodepool_fault, methods=["POST"]),
            Route("/v1/nodepool-faults", list_nodepool_faults, methods=["GET"]),
            Route("/v1/kube-faults", post_kube_fault, methods=["POST"]),
            Route("/v1/kube-faults", list_kube_faults, methods=["GET"]),
            Route("/v1/kube-requests", kube_requests, methods=["GET"]),
            Route("/v1/kube-forbidden", kube_forbidden, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
    )


# -- the command line ---------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", required=True, help="the inject API (inject_url in the ready file)"
    )
    parser.add_argument("--node", help="the node to break (node faults)")
    parser.add_argument("--rack", type=int, help="the NVL72 rack (--sxid, --rack-power, --clear)")
    parser.add_argument("--switch", type=int, default=0, help="with --sxid: the NVSwitch tray")
    parser.add_argument("--fatal", action="store_true", help="with --sxid: a fatal SXid")
    parser.add_argument("--gpu", type=int, metavar="N", help="the GPU index, where it applies")
    parser.add_argument("--ib-device", default="mlx5_0", help="InfiniBand device (mlx5_0…)")
    parser.add_argument(
        "--rate", type=float, default=1.0, help="heating rate for --temp, °C per second"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="HTTP timeout in seconds")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--xid", type=int, metavar="CODE", help="an XID on --gpu")
    what.add_argument("--sxid", type=int, metavar="CODE", help="an SXid on --rack's --switch")
    what.add_argument("--rack-power", action="store_true", help="--rack loses power")
    what.add_argument("--temp", type=float, metavar="CELSIUS", help="overheat toward CELSIUS")
    what.add_argument("--nvlink-errors", type=int, metavar="COUNT", help="an NVLink error burst")
    what.add_argument("--ib-link-down", action="store_true", help="take an IB link down")
    what.add_argument("--ib-symbol-errors", type=int, metavar="COUNT", help="IB symbol errors")
    what.add_argument("--condition", metavar="TYPE=STATUS", help="set a node condition")
    what.add_argument("--gpu-missing", action="store_true", help="the GPU drops out of the node")
    what.add_argument(
        "--nvlink-slow",
        type=float,
        metavar="FRACTION",
        help="the NVLink fabric carries this fraction (0-1] of its bandwidth",
    )
    what.add_argument(
        "--versions",
        action="store_true",
        help="the node runs --driver-version and/or --vbios-version instead of the pool's",
    )
    what.add_argument("--clear", action="store_true", help="repair the node (or --gpu)")
    what.add_argument(
        "--kube-fault",
        metavar="JSON",
        help='make the Kubernetes API misbehave, e.g. \'{"type": "error", "status": 503, '
        '"verbs": ["create"], "duration_seconds": 30}\' ({"type": "clear"} ends it)',
    )
    what.add_argument(
        "--nodepool-fault",
        metavar="JSON",
        help='make the cloud misbehave, e.g. \'{"type": "doa_next", "pool": "h100-train", '
        '"fault": {"type": "xid", "gpu": 0, "code": 79}}\' ({"type": "clear"} ends it)',
    )
    parser.add_argument("--driver-version", help="with --versions: the driver the node runs")
    parser.add_argument("--vbios-version", help="with --versions: the VBIOS its GPUs run")
    parser.add_argument(
        "--persistent",
        action="store_true",
        help="an --xid or --gpu-missing that a GPU reset or a reboot does not clear",
    )


def fault_body(args: argparse.Namespace) -> dict[str, Any]:
    """The JSON a command line asks for; ValueError names what is malformed."""
    rack_wanted = getattr(args, "sxid", None) is not None or getattr(args, "rack_power", False)
    if rack_wanted and getattr(args, "rack", None) is None:
        raise ValueError("--rack is required for --sxid and --rack-power")
    if getattr(args, "rack", None) is not None:
        body: dict[str, Any] = {"rack": args.rack}
        if args.sxid is not None:
            body.update(type="sxid", switch=args.switch, code=args.sxid, fatal=args.fatal)
        elif args.rack_power:
            body.update(type="rack_power")
        elif args.clear:
            body.update(type="clear")
        else:
            raise ValueError("--rack goes with --sxid, --rack-power or --clear")
        return body
    if args.node is None:
        raise ValueError("--node is required for a node fault")
    body = {"node": args.node}
    gpu = {"gpu": args.gpu} if args.gpu is not None else {}
    persistent = {"persistent": True} if getattr(args, "persistent", False) else {}
    if persistent and args.xid is None and not args.gpu_missing:
        raise ValueError("--persistent applies to --xid and --gpu-missing only")
    if args.xid is not None:
        body.update(type="xid", code=args.xid, **gpu, **persistent)
    elif args.temp is not None:
        body.update(type="temperature", celsius=args.temp, rate=args.rate, **gpu)
    elif args.nvlink_errors is not None:
        body.update(type="nvlink_errors", count=args.nvlink_errors, **gpu)
    elif args.ib_link_down:
        body.update(type="ib_link_down", device=args.ib_device)
    elif args.ib_symbol_errors is not None:
        body.update(type="ib_symbol_errors", device=args.ib_device, count=args.ib_symbol_errors)
    elif args.condition is not None:
        kind, sep, status = args.condition.partition("=")
        if not sep or not kind or status not in CONDITION_STATUSES:
            raise ValueError(
                f"--condition wants TYPE=STATUS with STATUS one of "
                f"{', '.join(CONDITION_STATUSES)}; got {args.condition!r}"
            )
        body.update(type="condition", condition=kind, status=status)
    elif args.gpu_missing:
        body.update(type="gpu_missing", **gpu, **persistent)
    elif args.nvlink_slow is not None:
        body.update(type="nvlink_slow", fraction=args.nvlink_slow)
    elif args.versions:
        versions = {
            k: v
            for k, v in (
                ("driver_version", args.driver_version),
                ("vbios_version", args.vbios_version),
            )
            if v
        }
        if not versions:
            raise ValueError("--versions needs --driver-version and/or --vbios-version")
        body.update(type="versions", **versions)
    else:
        body.update(type="clear", **gpu)
    return body


def run(args: argparse.Namespace) -> int:
    try:
        if args.kube_fault is not None:
            body, endpoint = json.loads(args.kube_fault), "/v1/kube-faults"
        elif args.nodepool_fault is not None:
            body, endpoint = json.loads(args.nodepool_fault), "/v1/nodepool-faults"
        else:
            body, endpoint = fault_body(args), "/v1/faults"
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    url = args.url.rstrip("/") + endpoint
    try:
        response = httpx.post(url, json=body, timeout=args.timeout)
    except httpx.HTTPError as exc:
        print(f"error: cannot reach the inject API at {url}: {exc}", file=sys.stderr)
        return 1
    try:
        answer = response.json()
    except ValueError:
        answer = {"error": {"message": response.text.strip() or response.reason_phrase}}
    if response.status_code >= 400:
        reason = (answer.get("error") or {}).get("message") or response.reason_phrase
        print(f"error: {response.status_code}: {reason}", file=sys.stderr)
        return 1
    print(answer.get("message", ""))
    print(json.dumps(answer.get("applied", answer), indent=2, sort_keys=True))
    return 0
