"""The node-pool API's reboot call (docs/nodepool-api.yaml, `POST /v1/pools/{pool}/reboots`):
the cloud power-cycles one instance, as EC2 RebootInstances or GCE instances.reset do.

The call is idempotent by its Idempotency-Key: asking again (after a crash, a lost answer) returns
the reboot already made and never reboots the machine a second time. The answer only says the
reboot was accepted; the caller watches the Node come back with a new boot id."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from remediator.clock import Clock
from remediator.sim.cloud.nodepool import (
    NodePoolError,
    NodePoolService,
    idempotency_key,
    replacement_body,
    rfc3339,
)


@dataclass(frozen=True)
class Reboot:
    id: str
    pool: str
    node: str
    reason: str
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pool": self.pool,
            "node": self.node,
            "reason": self.reason,
            "state": "accepted",
            "created_at": rfc3339(self.created_at),
        }


class RebootService:
    def __init__(self, pools: NodePoolService, clock: Clock, reboot: Callable[[str], None]) -> None:
        self._pools = pools
        self._clock = clock
        self._reboot = reboot
        self._lock = threading.Lock()
        self._by_key: dict[str, Reboot] = {}

    def request_reboot(
        self, pool: str, node: str, reason: str, key: str
    ) -> tuple[dict[str, Any], bool]:
        """The reboot for this key, and whether this call made it."""
        members = self._pools.pool_nodes(pool)["nodes"]
        with self._lock:
            existing = self._by_key.get(key)
            if existing is not None:
                if (existing.pool, existing.node) != (pool, node):
                    raise NodePoolError(
                        409,
                        "idempotency_key_reused",
                        f'Idempotency-Key "{key}" was used for rebooting node {existing.node} '
                        f"in pool {existing.pool}; use a new key for a different request",
                    )
                return existing.to_json(), False
            if node not in {m["name"] for m in members}:
                raise NodePoolError(
                    404, "node_not_found", f'node "{node}" is not in node pool "{pool}"'
                )
            made = Reboot(f"rb-{uuid.uuid4().hex[:16]}", pool, node, reason, self._clock.now())
            self._by_key[key] = made
        self._reboot(node)
        return made.to_json(), True

    async def handle(self, request: Request) -> Response:
        key = idempotency_key(request)
        body = await replacement_body(request)
        made, created = self.request_reboot(
            request.path_params["pool"], body.node, body.reason, key
        )
        if created:
            return JSONResponse(made, status_code=202)
        return JSONResponse(made, headers={"Idempotent-Replayed": "true"})
