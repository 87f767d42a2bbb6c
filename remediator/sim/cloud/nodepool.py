"""The simulated cloud's node-pool API: the cloud half of replacing a node.

The contract is docs/nodepool-api.yaml; the production HTTP provider is written against it, so this
module follows it to the letter (paths, status codes, error codes, headers). A replacement is an
asynchronous operation, pending → provisioning → succeeded | failed, driven by the cluster's tick
so it moves even when nobody polls. When provisioning starts the old instance is terminated (its
Node goes, its pods with it) and a new node named `<pool>-<suffix>` registers with the pool's labels
and GPUs, turning Ready after the provisioning delay; the operation succeeds once it is Ready.
Spare capacity is reserved when the request is accepted and given back if the operation fails;
each pool starts with DEFAULT_SPARE_CAPACITY spare nodes, which the inject app can change.

Deciding the next step is the pure `plan`; `NodePoolService.advance` carries it out. The service
never calls the cluster while holding its own lock, since the cluster calls `advance` from inside
its tick.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from remediator.clock import Clock
from remediator.errors import validation_message
from remediator.sim.kube.api.kobj import GPU_RESOURCE, POOL_LABEL, name_suffix
from remediator.sim.kube.api.store import ApiError, Obj, ObjectStore

DEFAULT_SPARE_CAPACITY = 4
MAX_KEY_LENGTH = 255
# Labels that belong to one machine, not to its pool.
PER_NODE_LABELS = frozenset({"kubernetes.io/hostname", "topology.kubernetes.io/zone", POOL_LABEL})


class OperationState(StrEnum):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


ACTIVE_STATES = frozenset({OperationState.PENDING, OperationState.PROVISIONING})


class NewNodeStatus(StrEnum):
    ABSENT = "absent"
    JOINING = "joining"
    READY = "ready"


def rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class OperationError:
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass
class Operation:
    id: str
    pool: str
    node: str
    reason: str
    idempotency_key: str
    created_at: datetime
    updated_at: datetime
    state: OperationState = OperationState.PENDING
    new_node: str | None = None
    error: OperationError | None = None
    started_at: datetime | None = None
    doomed: OperationError | None = None  # an injected failure waiting to happen
    action: str | None = None  # a whole rack's "repair" or "replace"; `node` names the rack

    def to_json(self) -> dict[str, Any]:
        rack = {"rack": self.node, "action": self.action} if self.action else {}
        return {
            **rack,
            "id": self.id,
            "pool": self.pool,
            "node": self.node,
            "reason": self.reason,
            "state": self.state.value,
            "new_node": self.new_node,
            "error": self.error.to_json() if self.error else None,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
        }


# -- the pure decision ------------------------------------------------------------------------


class Step(StrEnum):
    WAIT = "wait"
    START = "start"
    SUCCEED = "succeed"
    FAIL = "fail"


@dataclass(frozen=True)
class Plan:
    step: Step
    error: OperationError | None = None


def provisioning_timeout(delay: float) -> float:
    """How long a new node may take to turn Ready before the operation gives up."""
    return max(60.0, 10.0 * delay)


def plan(op: Operation, now: datetime, delay: float, new_node: NewNodeStatus) -> Plan:
    """The next step of one operation, given the time and what the cluster shows of its new node."""
    if op.state is OperationState.PENDING:
        return Plan(Step.START)
    if op.state is not OperationState.PROVISIONING or op.started_at is None:
        return Plan(Step.WAIT)
    elapsed = (now - op.started_at).total_seconds()
    if op.doomed is not None:
        return Plan(Step.FAIL, op.doomed) if elapsed >= delay else Plan(Step.WAIT)
    if new_node is NewNodeStatus.READY and elapsed >= delay:
        return Plan(Step.SUCCEED)
    if new_node is NewNodeStatus.ABSENT:
        return Plan(
            Step.FAIL,
            OperationError("node_lost", f"new node {op.new_node} disappeared while provisioning"),
        )
    if elapsed >= provisioning_timeout(delay):
        return Plan(
            Step.FAIL,
            OperationError(
                "provisioning_timeout",
                f"new node {op.new_node} did not become Ready within "
                f"{provisioning_timeout(delay):.0f}s",
            ),
        )
    return Plan(Step.WAIT)


# -- errors as the API reports them -----------------------------------------------------------


class NodePoolError(Exception):
    """An answer other than success: status, a stable machine-readable code, a message."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return error_response(self.status, self.code, self.message, self.headers)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


# -- injected request faults ------------------------------------------------------------------


@dataclass
class RequestFaults:
    """What the next requests suffer. Injecting a kind again replaces its previous rule; a kind
    with a method meets only requests of that method (POST: replacements and reboots)."""

    error_count: int = 0
    error_status: int = 500
    error_after_processing: bool = False
    error_method: str | None = None
    throttle_count: int = 0
    retry_after: int = 1
    throttle_method: str | None = None
    delay_count: int = 0
    delay_seconds: float = 0.0
    delay_method: str | None = None
    fail_next: list[OperationError] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "error": {
                "count": self.error_count,
                "status": self.error_status,
                "after_processing": self.error_after_processing,
                "method": self.error_method,
            },
            "throttle": {
                "count": self.throttle_count,
                "retry_after": self.retry_after,
                "method": self.throttle_method,
            },
            "delay": {
                "count": self.delay_count,
                "seconds": self.delay_seconds,
                "method": self.delay_method,
            },
            "fail_next": [e.to_json() for e in self.fail_next],
        }


@dataclass(frozen=True)
class RequestFate:
    """What one request meets: an error (before or after it is processed), a 429, a delay."""

    error_status: int | None = None
    error_after_processing: bool = False
    retry_after: int | None = None
    delay: float = 0.0


def take_fate(faults: RequestFaults, method: str) -> RequestFate:
    """Consume one request's share of the injected faults; errors take precedence over 429s."""
    fate = RequestFate()
    if faults.error_count > 0 and faults.error_method in (None, method):
        faults.error_count -= 1
        fate = replace(
            fate,
            error_status=faults.error_status,
            error_after_processing=faults.error_after_processing,
        )
    elif faults.throttle_count > 0 and faults.throttle_method in (None, method):
        faults.throttle_count -= 1
        fate = replace(fate, retry_after=faults.retry_after)
    if faults.delay_count > 0 and faults.delay_method in (None, method):
        faults.delay_count -= 1
        fate = replace(fate, delay=faults.delay_seconds)
    return fate


# -- the service ------------------------------------------------------------------------------


class PoolCluster(Protocol):
    """What the cloud needs of the simulated cluster."""

    store: ObjectStore

    def pools(self) -> dict[str, list[str]]: ...

    def add_node(
        self,
        name: str,
        pool: str,
        gpus: int,
        labels: dict[str, str] | None = None,
        ready_after: float = 0.0,
        taints: list[Obj] | None = None,
    ) -> Obj: ...

    def remove_node(self, name: str) -> None: ...


@dataclass(frozen=True)
class Position:
    """Where a replacement goes when the old machine had a fixed place (an NVL72 rack's tray
    slot): its name and the labels and taints of that place."""

    name: str
    labels: dict[str, str]
    taints: list[Obj]


# The place of a node being replaced (by name), or None for a node of no fixed place.
Positions = Callable[[str], Position | None]


class Racks(Protocol):
    """A cloud's racks (sim/rack/operations.py): their trays, and one rack's repair/replace."""

    def trays(self, rack: str) -> list[str] | None: ...

    def start(self, rack: str, action: str, delay: float) -> None: ...


@dataclass(frozen=True)
class PoolTemplate:
    """A pool's machine configuration, as the cloud knows it: fixed when the pool is first seen,
    so labels a controller later puts on a node never leak into its replacement."""

    labels: dict[str, str]
    gpus: int


def pool_template(nodes: list[Obj]) -> PoolTemplate:
    label_sets = [dict((n.get("metadata") or {}).get("labels") or {}) for n in nodes]
    common = dict(label_sets[0]) if label_sets else {}
    for labels in label_sets[1:]:
        common = {k: v for k, v in common.items() if labels.get(k) == v}
    for key in PER_NODE_LABELS:
        common.pop(key, None)
    gpus = 0
    for n in nodes:
        raw = ((n.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE, "0")
        gpus = max(gpus, int(raw)) if str(raw).isdigit() else gpus
    return PoolTemplate(labels=common, gpus=gpus)


def is_ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


class NodePoolService:
    def __init__(
        self,
        cluster: PoolCluster,
        clock: Clock,
        provision_delay: float = 3.0,
        default_spare: int = DEFAULT_SPARE_CAPACITY,
        positions: Positions | None = None,
        racks: Racks | None = None,
    ) -> None:
        self._cluster = cluster
        self._positions = positions
        self.racks = racks
        self._clock = clock
        self.provision_delay = provision_delay
        self._default_spare = default_spare
        self._lock = threading.Lock()
        self._templates: dict[str, PoolTemplate] = {}
        self._spare: dict[str, int] = {}
        self._ops: dict[str, Operation] = {}
        self._by_key: dict[str, Operation] = {}
        self.faults = RequestFaults()
        self.observe()

    # -- reading the cluster (never under the lock) ----------------------------------------

    def observe(self) -> dict[str, list[str]]:
        """The pools and their nodes now; pools seen for the first time get their template."""
        pools = self._cluster.pools()
        store = self._cluster.store
        with self._lock:
            unseen = [p for p in pools if p not in self._templates]
        for pool in unseen:
            nodes = [n for n in (store.find("nodes", "", name) for name in pools[pool]) if n]
            template = pool_template(nodes)
            with self._lock:
                self._templates.setdefault(pool, template)
                self._spare.setdefault(pool, self._default_spare)
        with self._lock:
            return {p: sorted(pools.get(p, [])) for p in sorted(self._templates)}

    def _rack_status(self, rack: str) -> NewNodeStatus:
        """A rack is Ready when every compute tray is; absent when one is missing."""
        trays = (self.racks.trays(rack) if self.racks else None) or []
        statuses = {self._new_node_status(t) for t in trays}
        for status in (NewNodeStatus.ABSENT, NewNodeStatus.JOINING):
            if status in statuses:
                return status
        return NewNodeStatus.READY

    def _new_node_status(self, name: str | None) -> NewNodeStatus:
        found = self._cluster.store.find("nodes", "", name) if name else None
        if found is None:
            return NewNodeStatus.ABSENT
        return NewNodeStatus.READY if is_ready(found) else NewNodeStatus.JOINING

    # -- the API's reads ---------------------------------------------------------------------

    def _pool_json(self, pool: str, nodes: list[str]) -> dict[str, Any]:
        template = self._templates[pool]
        return {
            "name": pool,
            "node_count": len(nodes),
            "labels": dict(sorted(template.labels.items())),
            "gpus_per_node": template.gpus,
            "spare_capacity": self._spare[pool],
        }

    def list_pools(self) -> dict[str, Any]:
        pools = self.observe()
        with self._lock:
            return {"pools": [self._pool_json(p, nodes) for p, nodes in pools.items()]}

    def _known(self, pools: dict[str, list[str]], pool: str) -> list[str]:
        if pool not in pools:
            raise NodePoolError(404, "pool_not_found", f'node pool "{pool}" does not exist')
        return pools[pool]

    def get_pool(self, pool: str) -> dict[str, Any]:
        pools = self.observe()
        nodes = self._known(pools, pool)
        with self._lock:
            return {**self._pool_json(pool, nodes), "nodes": nodes}

    def pool_nodes(self, pool: str) -> dict[str, Any]:
        pools = self.observe()
        nodes = self._known(pools, pool)
        with self._lock:
            replacing = {o.node for o in self._ops.values() if o.state in ACTIVE_STATES}
            joining = {
                o.new_node
                for o in self._ops.values()
                if o.state is OperationState.PROVISIONING and o.new_node
            }

        def state(name: str) -> str:
            if name in replacing:
                return "replacing"
            return "provisioning" if name in joining else "running"

        return {"nodes": [{"name": n, "pool": pool, "state": state(n)} for n in nodes]}

    def capacity(self, pool: str) -> dict[str, Any]:
        self._known(self.observe(), pool)
        with self._lock:
            return {"pool": pool, "spare_capacity": self._spare[pool]}

    def get_operation(self, op_id: str) -> dict[str, Any]:
        with self._lock:
            op = self._ops.get(op_id)
            if op is None:
                raise NodePoolError(
                    404, "operation_not_found", f'operation "{op_id}" does not exist'
                )
            return op.to_json()

    def list_operations(self) -> dict[str, Any]:
        """Every operation, oldest first, with the Idempotency-Key that created it: tooling for
        an outside checker (the chaos soak counts operations per remediation by key), not part
        of the contract a provider implements."""
        with self._lock:
            ops = sorted(self._ops.values(), key=lambda o: (o.created_at, o.id))
            return {
                "operations": [
                    {
                        **o.to_json(),
                        "idempotency_key": o.idempotency_key,
                        "started_at": rfc3339(o.started_at) if o.started_at else None,
                    }
                    for o in ops
                ]
            }

    # -- the API's one write -----------------------------------------------------------------

    def request_replacement(
        self, pool: str, node: str, reason: str, key: str
    ) -> tuple[dict[str, Any], bool]:
        """The operation for this idempotency key, and whether this call created it.

        The key is looked up before anything else, so a retry still answers after the old node
        is long gone; only a request that creates an operation binds its key.
        """
        pools = self.observe()
        now = self._clock.now()
        with self._lock:
            existing = self._by_key.get(key)
            if existing is not None:
                if (existing.pool, existing.node) != (pool, node):
                    raise NodePoolError(
                        409,
                        "idempotency_key_reused",
                        f'Idempotency-Key "{key}" was used for replacing node '
                        f"{existing.node} in pool {existing.pool} (operation {existing.id}); "
                        "use a new key for a different request",
                    )
                return existing.to_json(), False
            members = self._known(pools, pool)
            if node not in members:
                raise NodePoolError(
                    404, "node_not_found", f'node "{node}" is not in node pool "{pool}"'
                )
            for other in self._ops.values():
                if other.node == node and other.state in ACTIVE_STATES:
                    raise NodePoolError(
                        409,
                        "replacement_in_progress",
                        f"node {node} is already being replaced by operation {other.id}",
                    )
            if self._spare[pool] <= 0:
                raise NodePoolError(
                    409,
                    "capacity_exhausted",
                    f'node pool "{pool}" has no spare capacity: '
                    f"cannot replace node {node} now; retry later or free capacity in the pool",
                )
            self._spare[pool] -= 1
            op = Operation(
                id=f"op-{uuid.uuid4().hex[:16]}",
                pool=pool,
                node=node,
                reason=reason,
                idempotency_key=key,
                created_at=now,
                updated_at=now,
                doomed=self.faults.fail_next.pop(0) if self.faults.fail_next else None,
            )
            self._ops[op.id] = op
            self._by_key[key] = op
            return op.to_json(), True

    def request_rack(
        self, pool: str, rack: str, action: str, reason: str, key: str
    ) -> tuple[dict[str, Any], bool]:
        """A rack's repair or replacement as one operation; idempotent on the key as a
        replacement is. It takes no spare capacity: the rack comes back at its own place."""
        pools = self.observe()
        now = self._clock.now()
        with self._lock:
            existing = self._by_key.get(key)
            if existing is not None:
                if (existing.pool, existing.node, existing.action) != (pool, rack, action):
                    raise NodePoolError(
                        409,
                        "idempotency_key_reused",
                        f'Idempotency-Key "{key}" was used for operation {existing.id}; '
                        "use a new key for a different request",
                    )
                return existing.to_json(), False
            self._known(pools, pool)
            trays = self.racks.trays(rack) if self.racks else None
            if trays is None or not set(trays) <= set(pools[pool]):
                raise NodePoolError(
                    404, "rack_not_found", f'rack "{rack}" is not in node pool "{pool}"'
                )
            for other in self._ops.values():
                busy = other.node == rack or other.node in trays
                if busy and other.state in ACTIVE_STATES:
                    raise NodePoolError(
                        409,
                        "replacement_in_progress",
                        f"rack {rack} is already in operation {other.id}",
                    )
            op = Operation(
                id=f"op-{uuid.uuid4().hex[:16]}",
                pool=pool,
                node=rack,
                reason=reason,
                idempotency_key=key,
                created_at=now,
                updated_at=now,
                action=action,
            )
            self._ops[op.id] = op
            self._by_key[key] = op
            return op.to_json(), True

    # -- faults the inject app sets ----------------------------------------------------------

    def set_spare(self, pool: str, spare: int) -> None:
        self._known(self.observe(), pool)
        with self._lock:
            self._spare[pool] = spare

    def fail_next(self, count: int, code: str, message: str) -> None:
        with self._lock:
            self.faults.fail_next.extend(OperationError(code, message) for _ in range(count))

    def take_fate(self, method: str) -> RequestFate:
        with self._lock:
            return take_fate(self.faults, method)

    def update_faults(self, **changes: Any) -> dict[str, Any]:
        with self._lock:
            for name, value in changes.items():
                setattr(self.faults, name, value)
            return self.faults.to_json()

    def faults_json(self) -> dict[str, Any]:
        with self._lock:
            return self.faults.to_json()

    # -- the executor, run from the cluster's tick -------------------------------------------

    def advance(self, now: datetime) -> None:
        with self._lock:
            active = [op for op in self._ops.values() if op.state in ACTIVE_STATES]
        for op in active:
            status = self._rack_status(op.node) if op.action else self._new_node_status(op.new_node)
            decision = plan(op, now, self.provision_delay, status)
            if decision.step is Step.START:
                self._start(op, now)
            elif decision.step is Step.SUCCEED:
                self._finish(op, now, OperationState.SUCCEEDED, None)
            elif decision.step is Step.FAIL:
                self._finish(op, now, OperationState.FAILED, decision.error)

    def _start(self, op: Operation, now: datetime) -> None:
        new_name: str | None = None
        if op.action and self.racks is not None:
            self.racks.start(op.node, op.action, self.provision_delay)
            with self._lock:
                op.state = OperationState.PROVISIONING
                op.started_at = op.updated_at = now
            return
        if op.doomed is None:
            try:
                new_name = self._replace_instance(op)
            except ApiError as exc:
                self._finish(
                    op, now, OperationState.FAILED, OperationError("provisioning_failed", str(exc))
                )
                return
        with self._lock:
            op.state = OperationState.PROVISIONING
            op.started_at = op.updated_at = now
            op.new_node = new_name

    def _replace_instance(self, op: Operation) -> str:
        """Terminate the old instance, then register a new one from the pool's template (at the
        old one's position, under its name, where it had one)."""
        store = self._cluster.store
        if store.find("nodes", "", op.node) is not None:
            self._cluster.remove_node(op.node)
        with self._lock:
            template = self._templates[op.pool]
        position = self._positions(op.node) if self._positions else None
        if position is not None:
            self._cluster.add_node(
                position.name,
                op.pool,
                template.gpus,
                {**template.labels, **position.labels},
                ready_after=self.provision_delay,
                taints=position.taints,
            )
            return position.name
        attempt = 0
        name = f"{op.pool}-{name_suffix(op.id)}"
        while store.find("nodes", "", name) is not None:
            attempt += 1
            name = f"{op.pool}-{name_suffix(f'{op.id}/{attempt}')}"
        self._cluster.add_node(
            name, op.pool, template.gpus, dict(template.labels), ready_after=self.provision_delay
        )
        return name

    def _finish(
        self, op: Operation, now: datetime, state: OperationState, error: OperationError | None
    ) -> None:
        with self._lock:
            op.state = state
            op.error = error
            op.updated_at = now
            if state is OperationState.FAILED and not op.action:
                self._spare[op.pool] += 1


# -- HTTP ---------------------------------------------------------------------------------------


class RackRequest(BaseModel):
    reason: str = Field(max_length=1024)


class ReplacementRequest(BaseModel):
    node: str = Field(min_length=1, max_length=253)
    reason: str = Field(max_length=1024)


def idempotency_key(request: Request) -> str:
    key = request.headers.get("idempotency-key")
    if key is None:
        raise NodePoolError(
            400,
            "missing_idempotency_key",
            "the Idempotency-Key header is required: a retry with the same key returns the "
            "same operation instead of replacing a second node",
        )
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isprintable() or not key.isascii():
        raise NodePoolError(
            400,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable ASCII characters",
        )
    return key


async def replacement_body(request: Request) -> ReplacementRequest:
    return await json_body(request, ReplacementRequest)


ModelT = TypeVar("ModelT", bound=BaseModel)


async def json_body(request: Request, model: type[ModelT]) -> ModelT:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise NodePoolError(400, "invalid_json", f"request body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise NodePoolError(400, "invalid_request", "request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise NodePoolError(400, "invalid_request", validation_message(exc)) from exc


Handler = Callable[[Request], Awaitable[Response]]


def build_nodepool_app(service: NodePoolService, reboot: Handler | None = None) -> Starlette:
    def guarded(handler: Handler) -> Handler:
        """Every route meets the injected fate: an error before or after processing, a 429,
        a delayed answer (given after processing, so a client that times out may retry a request
        that already took effect)."""

        async def endpoint(request: Request) -> Response:
            fate = service.take_fate(request.method)
            try:
                if fate.error_status is not None and not fate.error_after_processing:
                    raise injected_error(fate.error_status)
                if fate.retry_after is not None:
                    raise NodePoolError(
                        429,
                        "rate_limited",
                        f"too many requests; retry after {fate.retry_after}s",
                        {"Retry-After": str(fate.retry_after)},
                    )
                response = await handler(request)
                if fate.error_status is not None:
                    raise injected_error(fate.error_status)
            except NodePoolError as err:
                response = err.response()
            if fate.delay:
                await asyncio.sleep(fate.delay)
            return response

        return endpoint

    async def list_pools(_request: Request) -> Response:
        return JSONResponse(service.list_pools())

    async def get_pool(request: Request) -> Response:
        return JSONResponse(service.get_pool(request.path_params["pool"]))

    async def pool_nodes(request: Request) -> Response:
        return JSONResponse(service.pool_nodes(request.path_params["pool"]))

    async def capacity(request: Request) -> Response:
        return JSONResponse(service.capacity(request.path_params["pool"]))

    async def get_operation(request: Request) -> Response:
        return JSONResponse(service.get_operation(request.path_params["operation_id"]))

    async def list_operations(_request: Request) -> Response:
        return JSONResponse(service.list_operations())

    async def replace_node(request: Request) -> Response:
        key = idempotency_key(request)
        body = await replacement_body(request)
        op, created = service.request_replacement(
            request.path_params["pool"], body.node, body.reason, key
        )
        location = {"Location": f"/v1/operations/{op['id']}"}
        if created:
            return JSONResponse(op, status_code=202, headers=location)
        return JSONResponse(op, headers={**location, "Idempotent-Replayed": "true"})

    async def rack_operation(request: Request) -> Response:
        if request.path_params["action"] not in ("repair", "replace"):
            raise NodePoolError(404, "not_found", "no such path in the node-pool API")
        key = idempotency_key(request)
        body = await json_body(request, RackRequest)
        op, created = service.request_rack(
            request.path_params["pool"],
            request.path_params["rack"],
            request.path_params["action"],
            body.reason,
            key,
        )
        location = {"Location": f"/v1/operations/{op['id']}"}
        if created:
            return JSONResponse(op, status_code=202, headers=location)
        return JSONResponse(op, headers={**location, "Idempotent-Replayed": "true"})

    async def http_error(_request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 405:
            headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else None
            return error_response(405, "method_not_allowed", "method not allowed here", headers)
        return error_response(status, "not_found", "no such path in the node-pool API")

    routes = [
        Route("/v1/pools", guarded(list_pools), methods=["GET"]),
        Route("/v1/pools/{pool}", guarded(get_pool), methods=["GET"]),
        Route("/v1/pools/{pool}/nodes", guarded(pool_nodes), methods=["GET"]),
        Route("/v1/pools/{pool}/capacity", guarded(capacity), methods=["GET"]),
        Route("/v1/pools/{pool}/replacements", guarded(replace_node), methods=["POST"]),
        Route("/v1/operations", guarded(list_operations), methods=["GET"]),
        Route("/v1/operations/{operation_id}", guarded(get_operation), methods=["GET"]),
        Route(
            "/v1/pools/{pool}/racks/{rack}/{action:str}",
            guarded(rack_operation),
            methods=["POST"],
        ),
    ]
    if reboot is not None:
        routes.append(Route("/v1/pools/{pool}/reboots", guarded(reboot), methods=["POST"]))
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


def injected_error(status: int) -> NodePoolError:
    if status == 503:
        return NodePoolError(
            503, "unavailable", "the service is temporarily unavailable", {"Retry-After": "1"}
        )
    return NodePoolError(500, "internal_error", "internal error")
