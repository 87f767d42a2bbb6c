"""What the simulated kubelet and controllers share: the store they write through, the informer
cache they read, a timer queue on the injected clock, the Event recorder, and the work queues
(dirty keys) that let a tick touch only what changed."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from remediator.clock import Clock
from remediator.sim.kube.api.kobj import is_terminal, name_suffix
from remediator.sim.kube.api.selectors import LabelSelector
from remediator.sim.kube.api.store import AlreadyExists, Obj, ObjectStore
from remediator.sim.kube.controllers import builders
from remediator.sim.kube.controllers.index import ClusterIndex, Key


@dataclass(frozen=True)
class ProgramRun:
    """What a started container does: exits with `exit_code` after `seconds`, having printed
    `output`; `then` runs once it exited (a reboot takes the host down after the command
    returns). The host programs themselves live in remediator/sim/node/programs.py."""

    exit_code: int
    output: str
    seconds: float
    then: Callable[[], None] | None = None


# What a started container does on its node (None: it runs until it is stopped).
ProgramRunner = Callable[[Obj, str], ProgramRun | None]

# Timer kinds: what to mark dirty when the timer is due.
POD, NODE, PDB, HEARTBEAT, NODE_READY, EVENT_GC = "pod", "node", "pdb", "heartbeat", "ready", "gc"
REBOOTED = "rebooted"


@dataclass
class WorkQueues:
    pods: dict[Key, None] = field(default_factory=dict)
    nodes: dict[str, None] = field(default_factory=dict)
    owners: dict[str, None] = field(default_factory=dict)  # controller uids whose pods changed
    owner_specs: dict[str, None] = field(default_factory=dict)  # controller uids whose spec changed
    pdbs: dict[Key, None] = field(default_factory=dict)
    reschedule: bool = False  # capacity or node state changed: retry unschedulable pods

    def busy(self) -> bool:
        return bool(self.pods or self.nodes or self.owners or self.owner_specs or self.pdbs)


@dataclass
class PodAddresses:
    """Each node's pod-address allocations, as its CNI's host-local IPAM keeps them: an address
    stays taken while the pod holding it is live on that node (not gone, not finished)."""

    store: ObjectStore
    _held: dict[str, dict[str, tuple[str, str, str | None]]] = field(default_factory=dict)

    def assign(self, pod: Obj, node: Obj) -> str:
        node_name = node["metadata"]["name"]
        held = self._held.setdefault(node_name, {})
        meta = pod["metadata"]
        holder = (meta["namespace"], meta["name"], meta.get("uid"))

        def in_use(ip: str) -> bool:
            other = held.get(ip)
            if other is None or other == holder:
                return False
            if self._live(other, node_name):
                return True
            del held[ip]
            return False

        ip = builders.pod_ip(pod, node, in_use)
        held[ip] = holder
        return ip

    def _live(self, holder: tuple[str, str, str | None], node: str) -> bool:
        namespace, name, uid = holder
        pod = self.store.find("pods", namespace, name)
        if pod is None or (uid is not None and pod["metadata"].get("uid") != uid):
            return False
        return pod["spec"].get("nodeName") == node and not is_terminal(pod)


@dataclass
class SimContext:
    store: ObjectStore
    clock: Clock
    index: ClusterIndex = field(default_factory=ClusterIndex)
    queues: WorkQueues = field(default_factory=WorkQueues)
    addresses: PodAddresses = field(init=False)
    _timers: list[tuple[datetime, int, str, object]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    programs: ProgramRunner | None = None
    logs: dict[Key, str] = field(default_factory=dict)  # output of containers that exited
    # node → (pods picked by a label selector, what their containers do: crash or unready)
    container_faults: dict[str, dict[str, tuple[LabelSelector, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.addresses = PodAddresses(self.store)

    def container_fault(self, pod: Obj) -> str | None:
        """What an injected fault makes this pod's containers do, if any."""
        faults = self.container_faults.get(pod.get("spec", {}).get("nodeName") or "")
        if not faults:
            return None
        labels = pod["metadata"].get("labels")
        return next((what for sel, what in faults.values() if sel.matches(labels)), None)

    def after(self, due: datetime, kind: str, arg: object) -> None:
        heapq.heappush(self._timers, (due, next(self._seq), kind, arg))

    def due_timers(self, now: datetime) -> list[tuple[str, object]]:
        out = []
        while self._timers and self._timers[0][0] <= now:
            _, _, kind, arg = heapq.heappop(self._timers)
            out.append((kind, arg))
        return out

    def record(
        self,
        involved: Obj,
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        component: str = "kubelet",
        host: str = "",
        field_path: str = "",
    ) -> None:
        self.store.create(
            "events",
            builders.event(
                involved,
                reason,
                message,
                self.clock.now(),
                next(self._seq),
                type_=type_,
                component=component,
                host=host,
                field_path=field_path,
            ),
        )

    def free_name(self, resource: str, namespace: str, prefix: str, seed: str) -> str:
        """A generated name not taken yet (for objects built before they are created)."""
        for attempt in range(25):
            name = prefix + name_suffix(f"{seed}/{attempt}")
            if self.store.find(resource, namespace, name) is None:
                return name
        raise AlreadyExists(f'{resource} "{prefix}…": no free generated name')

    def create_named(self, resource: str, obj: Obj, prefix: str, seed: str) -> Obj:
        """Create with a generated name `prefix + suffix`, deterministic for the seed and
        retried on the (rare) clash, as generateName is."""
        clash: AlreadyExists | None = None
        for attempt in range(25):
            obj["metadata"]["name"] = prefix + name_suffix(f"{seed}/{attempt}")
            try:
                return self.store.create(resource, obj)
            except AlreadyExists as exc:
                clash = exc
        assert clash is not None
        raise clash
