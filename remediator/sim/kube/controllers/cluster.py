"""A simulated GPU cluster: kubelets, scheduler and controllers over the `ObjectStore`, with
Kubernetes' graceful deletion, eviction and PodDisruptionBudget semantics and a seeded fleet.

Everything reaches the store through ordinary writes, so API watchers see what a real cluster
would show. Writes made by anyone (the simulated API server included) come back as watch
events, which mark the affected pods, nodes, controllers and budgets dirty; `tick()` folds the
events into the informer cache, fires due timers and reconciles only what is dirty, so a tick
costs what changed, not what exists (bench/sim_scale.py measures it). Time is the injected
Clock: tests drive it with a FakeClock and call `tick()`; the server runs `start()`."""

from __future__ import annotations

import logging
import threading
import uuid
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import cast

from remediator.clock import Clock, SystemClock
from remediator.sim.kube.api.deletion import Action, Deletion, plan_deletion
from remediator.sim.kube.api.disruption import (
    can_ignore_pdb,
    decrement,
    multiple_pdbs_error,
    unhealthy_pod_may_go,
)
from remediator.sim.kube.api.kobj import (
    GANG_GENERATION,
    GANG_LABEL,
    GPU_RESOURCE,
    POOL_LABEL,
    annotation,
    condition,
    controller_ref,
    is_ready,
    is_terminal,
    is_terminating,
    key_of,
    labels_of,
    owner_reference,
    rfc3339,
    selector_matches,
)
from remediator.sim.kube.api.selectors import parse_label_selector
from remediator.sim.kube.api.store import Conflict, NotFound, Obj, ObjectStore, WatchEvent
from remediator.sim.kube.controllers import builders
from remediator.sim.kube.controllers.context import (
    EVENT_GC,
    HEARTBEAT,
    NODE,
    NODE_READY,
    PDB,
    POD,
    REBOOTED,
    ProgramRunner,
    SimContext,
)
from remediator.sim.kube.controllers.controllers import Controllers
from remediator.sim.kube.controllers.index import WATCHED, Key
from remediator.sim.kube.controllers.kubelet import Kubelets, renew_lease, status_report_due
from remediator.sim.kube.controllers.scheduling import NodeView, pick_node, place_gang

__all__ = ["GPU_RESOURCE", "POOL_LABEL", "SimCluster"]

log = logging.getLogger(__name__)

MAX_ROUNDS = 8  # reconcile passes per tick; what is still dirty after that waits for the next
EVENT_TTL = timedelta(hours=1)  # the API server's default --event-ttl
EVENT_GC_EVERY = timedelta(minutes=10)


@dataclass
class Workload:
    """A controller object (or none, for a bare pod named by its template's metadata), its pod
    template and where each pod runs."""

    resource: str
    obj: Obj | None
    template: Obj
    nodes: list[str]
    parents: list[tuple[str, Obj]] = field(default_factory=list)  # created first, in order
    budget: Obj | None = None


@dataclass
class FleetPlan:
    """What `SimCluster.seed` creates already running; `remediator/sim/fleet.py` draws one up."""

    nodes: list[tuple[str, str]]  # (name, pool)
    gpus_per_node: int
    daemonsets: list[Obj]
    workloads: list[Workload]
    namespaces: tuple[str, ...] = ()
    pool_taints: dict[str, list[Obj]] = field(default_factory=dict)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # a node's own labels
    node_taints: dict[str, list[Obj]] = field(default_factory=dict)  # and its own taints


def heartbeat_interval(node: str) -> timedelta:
    """Each kubelet renews its node Lease on its own rhythm, between 10 and 40 s, stable per
    node; its node status goes out only on a change or every STATUS_REPORT_EVERY."""
    return timedelta(seconds=10 + zlib.crc32(node.encode()) % 31)


def _pdb_signature(pod: Obj | None) -> tuple[object, ...] | None:
    """What a budget's status depends on: membership (labels), readiness, termination."""
    if pod is None:
        return None
    return tuple(sorted(labels_of(pod).items())), is_ready(pod), is_terminating(pod)


def _node_signature(node: Obj) -> tuple[NodeView, str]:
    ready = condition(node, "Ready")
    return NodeView.of(node), str(ready.get("status") if ready else "Unknown")


class SimCluster:
    """The cluster's behaviour behind the simulated API server and cloud. Public methods are
    thread-safe (one lock, also held by `tick()`); watch callbacks only queue events."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.store = ObjectStore()
        self._clock: Clock = clock or SystemClock()
        self._ctx = SimContext(self.store, self._clock)
        self._kubelets = Kubelets(self._ctx)
        self._controllers = Controllers(self._ctx)
        self._lock = threading.RLock()
        self._inbox: deque[WatchEvent] = deque()
        for resource in WATCHED:
            self.store.subscribe(resource, self._inbox.append)
        self._unschedulable: set[Key] = set()
        self._tick_callbacks: list[Callable[[datetime], None]] = []
        self._added_callbacks: list[Callable[[Obj], None]] = []
        self._pool_taints: dict[str, list[Obj]] = {}
        self._startup_taints: list[Obj] = []
        self._feature_labels: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._ctx.after(self._clock.now() + EVENT_GC_EVERY, EVENT_GC, None)

    # -- nodes ---------------------------------------------------------------------------------

    def _node_object(
        self,
        name: str,
        pool: str,
        gpus: int,
        labels: dict[str, str] | None,
        ready: bool,
        taints: list[Obj] | None = None,
    ) -> Obj:
        obj = builders.node(
            name, pool, gpus, {**self._feature_labels, **(labels or {})}, ready, self._clock.now()
        )
        extra = [dict(t) for t in self._pool_taints.get(pool, [])] + [dict(t) for t in taints or []]
        if extra:
            obj["spec"]["taints"] = extra + list(obj["spec"].get("taints") or [])
        return obj

    def add_node(
        self,
        name: str,
        pool: str,
        gpus: int,
        labels: dict[str, str] | None = None,
        ready_after: float = 0.0,
        taints: list[Obj] | None = None,
    ) -> Obj:
        """Register a node as its kubelet would: NotReady until `ready_after` seconds pass.
        A node joining a seeded pool carries that pool's taints, as its node template would,
        and `taints` of its own (a spare tray's), and the startup taints (`set_startup_taints`) its
        kubelet registers with."""
        with self._lock:
            obj = self._node_object(name, pool, gpus, labels, ready=ready_after <= 0, taints=taints)
            if self._startup_taints:
                spec = obj["spec"]
                spec["taints"] = list(spec.get("taints") or []) + [
                    dict(t) for t in self._startup_taints
                ]
            created = self.store.create("nodes", obj)
            if ready_after > 0:
                self._ctx.after(
                    self._clock.now() + timedelta(seconds=ready_after), NODE_READY, name
                )
            for callback in list(self._added_callbacks):
                callback(created)
            return created

    def set_startup_taints(self, taints: list[Obj]) -> None:
        """What every machine a cloud adds from now on registers with (kubelet
        --register-with-taints: EKS bootstrap/nodeadm args, GKE node pool taints, Cluster API's
        nodeRegistration.taints); the seeded fleet is the running, already validated one."""
        with self._lock:
            self._startup_taints = [dict(t) for t in taints]

    def set_feature_labels(self, labels: dict[str, str]) -> None:
        """The labels GPU feature discovery gives every node from now on (sim/node/gfd.py: the
        pool's driver and CUDA versions), set before the fleet is seeded; a node's own labels
        win over them."""
        with self._lock:
            self._feature_labels = dict(labels)

    def on_node_added(self, callback: Callable[[Obj], None]) -> None:
        """Called with each node a cloud adds after the fleet was seeded: a new machine, which
        may arrive broken (sim/faults/arrivals.py)."""
        with self._lock:
            self._added_callbacks.append(callback)

    def remove_node(self, name: str) -> None:
        """The machine is gone: the Node object goes, and pod GC deletes its pods at once."""
        with self._lock:
            self._drain()
            self.store.delete("nodes", "", name)
            for pod in self._ctx.index.pods_on_node(name):
                try:
                    self.store.delete("pods", *key_of(pod))
                except NotFound:
                    continue
            self._drain()

    def pools(self) -> dict[str, list[str]]:
        nodes, _ = self.store.list("nodes")
        out: dict[str, list[str]] = {}
        for node in nodes:
            pool = labels_of(node).get(POOL_LABEL)
            if pool:
                out.setdefault(pool, []).append(node["metadata"]["name"])
        return {pool: sorted(names) for pool, names in sorted(out.items())}

    def set_node_condition(
        self, node: str, type: str, status: str, reason: str = "", message: str = ""
    ) -> None:
        """Report a condition as the kubelet or node-problem-detector would; the transition
        time moves only when the status does, and the lifecycle taints follow at once."""
        with self._lock:
            now = self._clock.now()
            ts = rfc3339(now)

            def change(obj: Obj) -> None:
                conditions = obj.setdefault("status", {}).setdefault("conditions", [])
                current = next((c for c in conditions if c.get("type") == type), None)
                if current is None:
                    current = {"type": type, "lastTransitionTime": ts}
                    conditions.append(current)
                elif current.get("status") != status:
                    current["lastTransitionTime"] = ts
                current.update(status=status, reason=reason, message=message, lastHeartbeatTime=ts)
                spec = obj.setdefault("spec", {})
                spec["taints"] = builders.managed_taints(obj, list(spec.get("taints") or []), now)
                if not spec["taints"]:
                    del spec["taints"]

            self.store.mutate("nodes", "", node, change)

    def set_container_fault(self, node: str, selector: str, behaviour: str | None) -> int:
        """Make the containers of the node's pods `selector` picks crash on each start
        ("crash") or fail readiness ("unready"); None ends it. The pods it picks now."""
        picked = parse_label_selector(selector)
        with self._lock:
            faults = self._ctx.container_faults.setdefault(node, {})
            if behaviour is None:
                faults.pop(selector, None)
            else:
                faults[selector] = (picked, behaviour)
            if not faults:
                del self._ctx.container_faults[node]
            pods = [
                p
                for p in self._ctx.index.pods_on_node(node)
                if picked.matches(p["metadata"].get("labels"))
            ]
            for pod in pods:
                self._ctx.queues.pods[key_of(pod)] = None
            return len(pods)

    def clear_container_faults(self, node: str) -> None:
        with self._lock:
            for pod in self._ctx.index.pods_on_node(node):
                self._ctx.queues.pods[key_of(pod)] = None
            self._ctx.container_faults.pop(node, None)

    def set_program_runner(self, runner: ProgramRunner) -> None:
        """What containers that run host programs (reset, diagnostics, reboot) do."""
        with self._lock:
            self._ctx.programs = runner

    def pod_log(self, namespace: str, name: str) -> str:
        with self._lock:
            return self._ctx.logs.get((namespace, name), "")

    def reboot_node(self, name: str, down_seconds: float) -> None:
        """The host goes down: the kubelet stops posting status (Ready Unknown) and comes back
        `down_seconds` later with a new boot id."""
        with self._lock:
            message = "Kubelet stopped posting node status."
            self.set_node_condition(name, "Ready", "Unknown", "NodeStatusUnknown", message)
            self._ctx.after(self._clock.now() + timedelta(seconds=down_seconds), REBOOTED, name)

    def _rebooted(self, name: str) -> None:
        boot_id = uuid.uuid4().hex

        def boot(obj: Obj) -> None:
            obj.setdefault("status", {}).setdefault("nodeInfo", {})["bootID"] = boot_id

        try:
            node = self.store.mutate("nodes", "", name, boot)
        except NotFound:
            return
        self._ctx.record(
            node,
            "Rebooted",
            f"Node {name} has been rebooted, boot id: {boot_id}",
            type_="Warning",
            host=name,
        )
        self._node_ready(name)

    def _node_ready(self, name: str) -> None:
        if self.store.find("nodes", "", name) is not None:
            self.set_node_condition(name, "Ready", "True", "KubeletReady", builders.READY_MESSAGE)

    def _heartbeat(self, name: str, now: datetime) -> None:
        node = self._ctx.index.nodes.get(name)
        if node is None:
            return
        self._ctx.after(now + heartbeat_interval(name), HEARTBEAT, name)
        ready = condition(node, "Ready")
        if ready is None or ready.get("status") not in ("True", "False"):
            return  # no kubelet is posting status for this node
        renew_lease(self._ctx, node, now)
        if not status_report_due(node, now):
            return
        ts = rfc3339(now)

        def beat(obj: Obj) -> None:
            for cond in obj.get("status", {}).get("conditions") or []:
                cond["lastHeartbeatTime"] = ts

        try:
            self.store.mutate("nodes", "", name, beat)
        except NotFound:
            return

    # -- pods: deletion and eviction ---------------------------------------------------------------

    def delete_pod(
        self,
        namespace: str,
        name: str,
        grace_period_seconds: int | None = None,
        uid_precondition: str | None = None,
    ) -> Obj:
        """DELETE a pod as the API server does: mark it terminating with a grace period (from
        the call, else spec.terminationGracePeriodSeconds) and let its kubelet stop it; delete at
        once when the grace is 0 or the pod never reached a node. A second delete may only
        shorten the grace. Returns the pod as stored (with deletionTimestamp)."""
        with self._lock:
            return self._delete_pod(namespace, name, grace_period_seconds, uid_precondition)

    def _delete_pod(
        self, namespace: str, name: str, grace: int | None, uid_precondition: str | None
    ) -> Obj:
        now = self._clock.now()
        while True:  # like GuaranteedUpdate: decide on the latest version, retry if it moved
            pod = self.store.get("pods", namespace, name)
            uid = pod["metadata"]["uid"]
            if uid_precondition and uid_precondition != uid:
                raise Conflict(
                    f'Operation cannot be fulfilled on pods "{name}": Precondition failed: UID '
                    f"in precondition: {uid_precondition}, UID in object meta: {uid}",
                    details={"name": name, "kind": "pods"},
                )
            plan = plan_deletion(pod, grace, now)
            if plan.action is Action.KEEP:
                return pod
            if plan.action is Action.REMOVE:
                return self._remove_now(namespace, name, now)

            def mark(obj: Obj, plan: Deletion = plan) -> None:
                obj["metadata"]["deletionTimestamp"] = plan.timestamp
                obj["metadata"]["deletionGracePeriodSeconds"] = plan.grace

            try:
                return self.store.mutate(
                    "pods", namespace, name, mark, expect_rv=pod["metadata"]["resourceVersion"]
                )
            except Conflict:
                continue

    def _remove_now(self, namespace: str, name: str, now: datetime) -> Obj:
        gone = self.store.delete("pods", namespace, name)
        gone["metadata"].setdefault("deletionTimestamp", rfc3339(now))
        gone["metadata"]["deletionGracePeriodSeconds"] = 0
        return gone

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """POST pods/NAME/eviction (policy/v1): NotFound when the pod is gone; a terminating,
        pending or finished pod goes without consulting budgets; several matching budgets are a
        500; one budget must allow a disruption (it is spent here) or the answer is 429."""
        with self._lock:
            now = self._clock.now()
            pod = self.store.get("pods", namespace, name)
            if not can_ignore_pdb(pod):
                budgets, _ = self.store.list("policy/poddisruptionbudgets", namespace)
                labels = labels_of(pod)
                matching = sorted(
                    (
                        b
                        for b in budgets
                        if selector_matches(b.get("spec", {}).get("selector"), labels)
                    ),
                    key=lambda b: b["metadata"]["name"],
                )
                if len(matching) > 1:
                    raise multiple_pdbs_error()
                if matching and not unhealthy_pod_may_go(pod, matching[0]):
                    self.store.mutate(
                        "policy/poddisruptionbudgets",
                        namespace,
                        matching[0]["metadata"]["name"],
                        lambda budget: decrement(budget, name, now),
                    )
                uid = pod["metadata"]["uid"]

                def target(obj: Obj) -> None:
                    if obj["metadata"]["uid"] == uid:
                        builders.disruption_target(obj, now)

                self.store.mutate("pods", namespace, name, target)
            self._delete_pod(namespace, name, grace_period_seconds, None)

    # -- the loop ------------------------------------------------------------------------------

    def on_tick(self, callback: Callable[[datetime], None]) -> None:
        with self._lock:
            self._tick_callbacks.append(callback)

    def tick(self) -> None:
        with self._lock:
            now = self._clock.now()
            self._drain()
            self._fire_timers(now)
            for callback in list(self._tick_callbacks):
                callback(now)
            self._reconcile(now)

    def start(self, interval: float = 0.1) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._run, args=(interval,), name="sim-cluster", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        thread.join(timeout=10)
        self._thread = None

    def _run(self, interval: float) -> None:
        while not self._stopping.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("simulated cluster tick failed")
            self._stopping.wait(interval)

    def _fire_timers(self, now: datetime) -> None:
        queues = self._ctx.queues
        for kind, arg in self._ctx.due_timers(now):
            if kind == POD:
                queues.pods[cast(Key, arg)] = None
            elif kind == NODE:
                queues.nodes[str(arg)] = None
            elif kind == NODE_READY:
                self._node_ready(str(arg))
            elif kind == REBOOTED:
                self._rebooted(str(arg))
            elif kind == PDB:
                queues.pdbs[cast(Key, arg)] = None
            elif kind == HEARTBEAT:
                self._heartbeat(str(arg), now)
            elif kind == EVENT_GC:
                self._collect_events(now)

    def _collect_events(self, now: datetime) -> None:
        self._ctx.after(now + EVENT_GC_EVERY, EVENT_GC, None)
        events, _ = self.store.list("events")
        cutoff = rfc3339(now - EVENT_TTL)
        for ev in events:
            if (ev.get("lastTimestamp") or ev["metadata"].get("creationTimestamp", "")) < cutoff:
                try:
                    self.store.delete("events", *key_of(ev))
                except NotFound:
                    continue

    def _reconcile(self, now: datetime) -> None:
        ctx, queues = self._ctx, self._ctx.queues
        for _ in range(MAX_ROUNDS):
            self._drain()
            if not queues.busy() and not self._has_scheduling_work():
                return
            nodes, queues.nodes = queues.nodes, {}
            for name in nodes:
                self._controllers.sync_node(name, now)
            self._drain()  # each phase reads what the one before wrote
            pods, queues.pods = queues.pods, {}
            for key in pods:
                pod = ctx.index.pods.get(key)
                if pod is not None:
                    self._kubelets.sync(pod, now)
            self._drain()
            specs, queues.owner_specs = queues.owner_specs, {}
            owners, queues.owners = queues.owners, {}
            for uid in {**specs, **owners}:
                self._controllers.sync_owner(uid, now, spec_changed=uid in specs)
            self._drain()
            self._schedule(now)
            self._drain()
            pdbs, queues.pdbs = queues.pdbs, {}
            for key in pdbs:
                self._controllers.sync_pdb(key, now)

    # -- watch intake ----------------------------------------------------------------------------

    def _drain(self) -> None:
        """Fold pending watch events into the cache and mark what they affect dirty."""
        index, queues = self._ctx.index, self._ctx.queues
        while self._inbox:
            event = self._inbox.popleft()
            old = index.apply(event)
            new = None if event.type == "DELETED" else event.object
            if event.resource == "pods":
                self._on_pod(old, new)
            elif event.resource == "nodes":
                self._on_node(event.object["metadata"]["name"], old, new)
            elif event.resource == "policy/poddisruptionbudgets":
                queues.pdbs[key_of(event.object)] = None
            else:
                uid = event.object["metadata"]["uid"]
                queues.owners[uid] = None
                if old is None or new is None or old.get("spec") != new.get("spec"):
                    queues.owner_specs[uid] = None
                parent = controller_ref(event.object)
                if parent is not None:
                    queues.owners[parent["uid"]] = None

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        index, queues = self._ctx.index, self._ctx.queues
        current = new if new is not None else old
        assert current is not None
        key = key_of(current)
        if new is not None:
            queues.pods[key] = None
        else:
            self._kubelets.forget(current["metadata"]["uid"])
            self._unschedulable.discard(key)
            queues.reschedule = True
        if new is not None and is_terminal(new) and not (old is not None and is_terminal(old)):
            queues.reschedule = True
        for pod in (old, new):
            ref = controller_ref(pod) if pod is not None else None
            if ref is not None:
                queues.owners[ref["uid"]] = None
        if _pdb_signature(old) != _pdb_signature(new):
            for pod in (old, new):
                if pod is not None:
                    for budget in index.pdbs_for_labels(key[0], labels_of(pod)):
                        queues.pdbs[budget] = None

    def _on_node(self, name: str, old: Obj | None, new: Obj | None) -> None:
        index, queues = self._ctx.index, self._ctx.queues
        if new is not None and old is not None and _node_signature(old) == _node_signature(new):
            return
        if new is not None and old is None:
            interval = heartbeat_interval(name)
            # Kubelets started at different moments: spread the first beats over the interval.
            phase_ms = zlib.crc32(f"{name}/phase".encode()) % (interval.seconds * 1000)
            first = self._clock.now() + timedelta(milliseconds=phase_ms)
            self._ctx.after(first, HEARTBEAT, name)
        queues.nodes[name] = None
        queues.reschedule = True
        for key in index.pods_by_node.get(name, ()):
            queues.pods[key] = None

    # -- scheduling ------------------------------------------------------------------------------

    def _has_scheduling_work(self) -> bool:
        pending = self._ctx.index.pending
        if not pending:
            return False
        return self._ctx.queues.reschedule or any(k not in self._unschedulable for k in pending)

    def _schedule(self, now: datetime) -> None:
        index, queues = self._ctx.index, self._ctx.queues
        if not index.pending:
            queues.reschedule = False
            return
        if queues.reschedule:
            self._unschedulable.clear()
            queues.reschedule = False
        todo = [index.pods[k] for k in index.pending if k not in self._unschedulable]
        if not todo:
            return
        views = list(index.views.values())
        gangs: dict[tuple[str, str, str], list[Obj]] = {}
        for pod in todo:
            gang = labels_of(pod).get(GANG_LABEL)
            if gang:
                ns = pod["metadata"]["namespace"]
                gangs.setdefault((ns, gang, annotation(pod, GANG_GENERATION) or ""), []).append(pod)
                continue
            ref = controller_ref(pod)
            owner = ref["uid"] if ref else None
            node, message = pick_node(pod, index.nodes_for(pod), index.usage, owner, views)
            if node is None:
                self._unschedulable_pod(pod, message, now)
            else:
                self._bind(pod, node, now)
                self._drain()
        for members in gangs.values():
            members.sort(
                key=lambda p: (
                    annotation(p, "batch.kubernetes.io/job-completion-index") or ""
                ).zfill(6)
            )
            ref = controller_ref(members[0])
            owner = ref["uid"] if ref else None
            candidates = index.nodes_for(members[0])
            placement, message = place_gang(members, candidates, index.usage, owner, views)
            for pod in members:
                if placement is None:
                    self._unschedulable_pod(pod, message, now)
                else:
                    self._bind(pod, placement[pod["metadata"]["name"]], now)
            self._drain()

    def _bind(self, pod: Obj, node: str, now: datetime) -> None:
        uid = pod["metadata"]["uid"]

        def bind(obj: Obj) -> None:
            unbound = not obj["spec"].get("nodeName") and not is_terminating(obj)
            if obj["metadata"]["uid"] == uid and unbound:
                builders.scheduled(obj, node, now)

        ns, name = key_of(pod)
        try:
            bound = self.store.mutate("pods", ns, name, bind)
        except NotFound:
            return
        if bound["spec"].get("nodeName") == node:
            self._ctx.record(
                bound,
                "Scheduled",
                f"Successfully assigned {ns}/{name} to {node}",
                component="default-scheduler",
            )

    def _unschedulable_pod(self, pod: Obj, message: str, now: datetime) -> None:
        key = key_of(pod)
        self._unschedulable.add(key)
        cond = condition(pod, "PodScheduled")
        if cond is not None and cond.get("message") == message:
            return
        uid = pod["metadata"]["uid"]

        def mark(obj: Obj) -> None:
            if obj["metadata"]["uid"] == uid and not obj["spec"].get("nodeName"):
                builders.unschedulable(obj, message, now)

        try:
            self.store.mutate("pods", *key, mark)
        except NotFound:
            return
        self._ctx.record(
            pod, "FailedScheduling", message, type_="Warning", component="default-scheduler"
        )

    # -- the seeded fleet ------------------------------------------------------------------------

    def seed(self, plan: FleetPlan) -> None:
        """Create the fleet of `plan` already running, as if the cluster had been up for a while,
        then reconcile once so every status is filled in."""
        with self._lock:
            now = self._clock.now()
            gpus_per_node = plan.gpus_per_node
            self._pool_taints.update(plan.pool_taints)
            for namespace in plan.namespaces:
                if self.store.find("namespaces", "", namespace) is None:
                    self.store.create("namespaces", _namespace(namespace, now))
            node_objs: dict[str, Obj] = {}
            for name, pool in plan.nodes:
                node_objs[name] = self.store.create(
                    "nodes",
                    self._node_object(
                        name,
                        pool,
                        gpus_per_node,
                        plan.node_labels.get(name),
                        ready=True,
                        taints=plan.node_taints.get(name),
                    ),
                )
            for ds in plan.daemonsets:
                created = self.store.create("apps/daemonsets", ds)
                template = self._controllers.daemon_template(created)
                owner = owner_reference(created, "DaemonSet", "apps/v1")
                ds_name = created["metadata"]["name"]
                for node in node_objs.values():
                    if self._controllers.should_run(template, node)[0]:
                        pod = builders.pod_from_template(
                            template,
                            "",
                            created["metadata"]["namespace"],
                            owner,
                            now,
                            labels={"pod-template-generation": "1"},
                        )
                        self._create_running(
                            pod, node, f"{ds_name}-", f"{ds_name}/{node['metadata']['name']}", now
                        )
            for workload in plan.workloads:
                self._seed_workload(workload, node_objs, now)
            self._reconcile(now)

    def _seed_workload(self, workload: Workload, nodes: dict[str, Obj], now: datetime) -> None:
        parent: Obj | None = None
        for resource, obj in workload.parents:
            parent = self.store.create(resource, obj)
        if workload.obj is None:
            template = workload.template
            meta = template["metadata"]
            pod = builders.pod_from_template(template, meta["name"], meta["namespace"], None, now)
            self._create_running(pod, nodes[workload.nodes[0]], "", "", now)
            return
        obj = dict(workload.obj)
        obj["metadata"] = dict(obj["metadata"])
        if parent is not None:
            obj["metadata"]["ownerReferences"] = [owner_reference(parent, "Deployment", "apps/v1")]
        if workload.resource == "batch/jobs":
            obj["metadata"]["annotations"] = {GANG_GENERATION: "1"}
        owner = self.store.create(workload.resource, obj)
        name, ns = owner["metadata"]["name"], owner["metadata"]["namespace"]
        for i, node_name in enumerate(workload.nodes):
            if workload.resource == "batch/jobs":
                pod = self._controllers.job_pod(owner, i, 1, now)
                prefix = f"{name}-{i}-"
            else:
                ref = owner_reference(owner, "ReplicaSet", "apps/v1")
                pod = builders.pod_from_template(workload.template, "", ns, ref, now)
                prefix = f"{name}-"
            self._create_running(pod, nodes[node_name], prefix, f"{name}/{i}", now)
        if workload.budget is not None:
            self.store.create("policy/poddisruptionbudgets", workload.budget)

    def _create_running(self, pod: Obj, node: Obj, prefix: str, seed: str, now: datetime) -> None:
        """Create a pod as it looks once bound, started and ready on `node`."""
        if prefix:
            meta = pod["metadata"]
            meta["name"] = self._ctx.free_name("pods", meta["namespace"], prefix, seed)
        builders.scheduled(pod, node["metadata"]["name"], now)
        builders.creating(pod, builders.node_ip(node), now)
        builders.running(pod, self._ctx.addresses.assign(pod, node), now)
        self.store.create("pods", pod)


def _namespace(name: str, now: datetime) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/metadata.name": name},
            "creationTimestamp": rfc3339(now),
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
