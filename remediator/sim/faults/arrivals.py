"""Machines that arrive broken: dead on arrival.

New machines come from four clouds here (the node-pool API, AWS through moto, Cluster API
MachineSets, GCE MIGs), and every one of them registers its Node through `SimCluster.add_node`;
this module listens there, so `doa_next` and the DOA rate hold for all of them alike. A fault
queued for a pool with `doa_next` goes to that pool's next new node; with a rate, each new node
otherwise arrives bad with that probability, with a fault drawn from `MENU`. The fault is applied
through the fault injector the moment the node registers, before it turns Ready, as broken
hardware is broken from its first boot.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from remediator.sim.faults.inject import FAULT, BadFault, FaultInjector
from remediator.sim.kube.api.kobj import POOL_LABEL
from remediator.sim.kube.api.store import Obj
from remediator.sim.telemetry.exporters import node_gpu_count

log = logging.getLogger(__name__)

OTHER_DRIVER = "535.183.01"


def _xid_79(rng: random.Random, gpus: int) -> dict[str, Any]:
    return {"type": "xid", "gpu": rng.randrange(gpus), "code": 79, "persistent": True}


def _gpu_missing(rng: random.Random, gpus: int) -> dict[str, Any]:
    return {"type": "gpu_missing", "gpu": rng.randrange(gpus), "persistent": True}


def _ib_down(rng: random.Random, gpus: int) -> dict[str, Any]:
    return {"type": "ib_link_down", "device": f"mlx5_{rng.randrange(gpus)}"}


# What a bad new machine has, as fleets report them: a GPU off the bus or missing, a slow NVLink,
# an InfiniBand port down, a driver other than the pool's.
MENU: tuple[Callable[[random.Random, int], dict[str, Any]], ...] = (
    _xid_79,
    _gpu_missing,
    lambda rng, gpus: {"type": "nvlink_slow", "fraction": 0.5},
    _ib_down,
    lambda rng, gpus: {"type": "versions", "driver_version": OTHER_DRIVER},
)


class ArrivalFaults:
    def __init__(self, injector: FaultInjector, rate: float = 0.0, seed: int = 0) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"a DOA rate is a fraction between 0 and 1, not {rate}")
        self._injector = injector
        self.rate = rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._queued: dict[str, deque[dict[str, Any]]] = {}
        # What the latest dead-on-arrival nodes got, for the inject API's listing.
        self._arrived: deque[dict[str, Any]] = deque(maxlen=200)

    def doa_next(self, pool: str, fault: dict[str, Any], count: int) -> None:
        with self._lock:
            self._queued.setdefault(pool, deque()).extend(dict(fault) for _ in range(count))

    def clear(self) -> None:
        with self._lock:
            self._queued.clear()

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "doa_next": {pool: list(q) for pool, q in sorted(self._queued.items()) if q},
                "doa_rate": self.rate,
                "dead_on_arrival": list(self._arrived),
            }

    def _choose(self, pool: str, gpus: int) -> dict[str, Any] | None:
        with self._lock:
            queue = self._queued.get(pool)
            if queue:
                return queue.popleft()
            if self.rate > 0 and gpus > 0 and self._rng.random() < self.rate:
                return self._rng.choice(MENU)(self._rng, gpus)
            return None

    def node_added(self, node: Obj) -> None:
        """SimCluster.on_node_added: a new machine registered."""
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        pool = (meta.get("labels") or {}).get(POOL_LABEL, "")
        template = self._choose(pool, node_gpu_count(node))
        if template is None:
            return
        fault = FAULT.validate_python({**template, "node": name})
        try:
            message = self._injector.apply(fault)
        except BadFault as err:
            # e.g. a GPU index beyond this machine's GPUs: said, not hidden.
            log.warning("sim: new node %s could not arrive with %s: %s", name, template, err)
            return
        with self._lock:
            self._arrived.append({"node": name, "pool": pool, **template})
        log.info("sim: new node %s of pool %s is dead on arrival: %s", name, pool, message)
