"""Cluster API for `sim serve --cloud clusterapi`: each pool becomes a MachineDeployment with one
MachineSet, each seeded Node gets its Machine (`status.nodeRef`, and on the Node the
`cluster.x-k8s.io/machine` annotations Cluster API writes), and a MachineSet controller keeps
`spec.replicas` Machines: a missing one is created (phase Provisioning), its Node registers after
the provision delay (phase Running, `nodeRef` set), and a deleted Machine's Node is removed.

Launch faults are queued on a pool's MachineDeployment, so kubectl sets them:
`sim.remediator.io/launch-faults: "insufficient_capacity,never_ready"` — each new Machine of the
pool takes the first. `insufficient_capacity`: the Machine fails as Cluster API reports an
infrastructure provider's failure (phase Failed, `failureReason` InsufficientResources, a
`failureMessage` naming the infrastructure object, the InfrastructureReady condition False with
severity Error), and no Node comes; a MachineSet does not replace a failed Machine (remediating
it is a MachineHealthCheck's job). `never_ready`: the Node registers and never turns Ready.

The pool's Cluster (`sim`) is served too. Its `spec.paused` (what `clusterctl move` sets) stops
the MachineSet controller, as does a MachineSet's own `cluster.x-k8s.io/paused` annotation (any
value but "false"), exactly Cluster API's `IsPaused`: a deleted Machine is then not replaced until
the pause ends, and the MachineSet carries a `Paused` condition (status.v1beta2) saying why. A
MachineDeployment's pause does not stop its MachineSets, as in Cluster API.

It runs on the cluster's tick; the objects are served by the simulated API server as the CRDs
would serve them (discovery, list, watch, get, patch, delete), so kubectl works against them.

The simulated infrastructure provider honours `reboot.sim.x-k8s.io` on a Machine the way Metal3
honours `reboot.metal3.io` on a BareMetalHost: it power-cycles the host and removes the annotation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from remediator.sim.cloud.nodepool import pool_template
from remediator.sim.kube.api.kobj import name_suffix, owner_reference, rfc3339
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import SimCluster

GV = "cluster.x-k8s.io/v1beta1"
MACHINES = "cluster.x-k8s.io/machines"
MACHINESETS = "cluster.x-k8s.io/machinesets"
DEPLOYMENTS = "cluster.x-k8s.io/machinedeployments"
CLUSTERS = "cluster.x-k8s.io/clusters"
PAUSED = "cluster.x-k8s.io/paused"
LAUNCH_FAULTS = "sim.remediator.io/launch-faults"
LAUNCH_FAULT_KINDS = ("insufficient_capacity", "never_ready")
NEVER = 10.0**9
INSTANCE_TYPE = "p5.48xlarge"
NAMESPACE = "default"
CLUSTER = "sim"
REBOOT_ANNOTATION = "reboot.sim.x-k8s.io"


def _labels(pool: str, machineset: str) -> dict[str, str]:
    return {
        "cluster.x-k8s.io/cluster-name": CLUSTER,
        "cluster.x-k8s.io/deployment-name": pool,
        "cluster.x-k8s.io/set-name": machineset,
    }


def machine(name: str, pool: str, ms: Obj, node: Obj | None) -> Obj:
    status: Obj = {"phase": "Provisioning", "bootstrapReady": True, "infrastructureReady": False}
    if node is not None:
        status = {
            "phase": "Running",
            "bootstrapReady": True,
            "infrastructureReady": True,
            "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": node["metadata"]["name"]},
        }
    return {
        "apiVersion": GV,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": _labels(pool, ms["metadata"]["name"]),
            "ownerReferences": [owner_reference(ms, "MachineSet", GV)],
        },
        "spec": {
            "clusterName": CLUSTER,
            "bootstrap": {"dataSecretName": f"{name}-bootstrap"},
            "infrastructureRef": {
                "apiVersion": "sim.x-k8s.io/v1",
                "kind": "SimMachine",
                "name": name,
            },
            "providerID": f"simcloud://{pool}/{name}",
        },
        "status": status,
    }


def failed_status(name: str, zone: str, at: str) -> Obj:
    """A Machine whose infrastructure could not be created for want of capacity, as the Machine
    controller surfaces its infrastructure object's terminal failure."""
    cause = (
        f"InsufficientInstanceCapacity: We currently do not have sufficient {INSTANCE_TYPE} "
        f"capacity in the Availability Zone you requested ({zone})"
    )
    return {
        "phase": "Failed",
        "bootstrapReady": True,
        "infrastructureReady": False,
        "failureReason": "InsufficientResources",
        "failureMessage": (
            f"Failure detected from referenced resource sim.x-k8s.io/v1, Kind=SimMachine with "
            f'name "{name}": {cause}'
        ),
        "conditions": [
            {
                "type": "InfrastructureReady",
                "status": "False",
                "severity": "Error",
                "reason": "InstanceProvisionFailed",
                "message": cause,
                "lastTransitionTime": at,
            },
            {
                "type": "Ready",
                "status": "False",
                "severity": "Error",
                "reason": "InstanceProvisionFailed",
                "message": cause,
                "lastTransitionTime": at,
            },
        ],
    }


@dataclass
class SimClusterApi:
    cluster: SimCluster
    provision_delay: float
    max_surge: int = 1
    reboot: Callable[[str], None] | None = None  # power-cycles a node by name
    _due: dict[str, datetime] = field(default_factory=dict)  # machine → when its node registers
    _nodes: dict[str, str] = field(default_factory=dict)  # machine → its node
    _faults: dict[str, str] = field(default_factory=dict)  # machine → its launch fault
    _templates: dict[str, tuple[dict[str, str], int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bootstrap(self) -> None:
        store = self.cluster.store
        owner = store.create(CLUSTERS, self._cluster())
        for pool, names in self.cluster.pools().items():
            nodes = [n for n in (store.find("nodes", "", name) for name in names) if n]
            template = pool_template(nodes)
            self._templates[pool] = (template.labels, template.gpus)
            md = store.create(DEPLOYMENTS, self._deployment(pool, len(names), owner))
            ms = store.create(MACHINESETS, self._machineset(pool, md, len(names)))
            for node in nodes:
                name = node["metadata"]["name"]
                store.create(MACHINES, machine(name, pool, ms, node))
                self._annotate(name, name, ms)
                self._nodes[name] = name

    @staticmethod
    def _cluster() -> Obj:
        return {
            "apiVersion": GV,
            "kind": "Cluster",
            "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
            "spec": {"paused": False},
            "status": {"phase": "Provisioned"},
        }

    def _deployment(self, pool: str, replicas: int, owner: Obj) -> Obj:
        return {
            "apiVersion": GV,
            "kind": "MachineDeployment",
            "metadata": {
                "name": pool,
                "namespace": NAMESPACE,
                "labels": {"cluster.x-k8s.io/cluster-name": CLUSTER},
                "ownerReferences": [owner_reference(owner, "Cluster", GV)],
            },
            "spec": {
                "clusterName": CLUSTER,
                "replicas": replicas,
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": self.max_surge, "maxUnavailable": 0},
                },
                "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": pool}},
            },
            "status": {"phase": "Running", "replicas": replicas},
        }

    def _machineset(self, pool: str, md: Obj, replicas: int) -> Obj:
        name = f"{pool}-{name_suffix(pool)}"
        return {
            "apiVersion": GV,
            "kind": "MachineSet",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"cluster.x-k8s.io/deployment-name": pool},
                "ownerReferences": [owner_reference(md, "MachineDeployment", GV)],
            },
            "spec": {
                "clusterName": CLUSTER,
                "replicas": replicas,
                "selector": {"matchLabels": {"cluster.x-k8s.io/set-name": name}},
            },
            "status": {"replicas": replicas},
        }

    def _annotate(self, node: str, machine_name: str, ms: Obj) -> None:
        def change(obj: Obj) -> None:
            obj["metadata"].setdefault("annotations", {}).update(
                {
                    "cluster.x-k8s.io/machine": machine_name,
                    "cluster.x-k8s.io/cluster-name": CLUSTER,
                    "cluster.x-k8s.io/cluster-namespace": NAMESPACE,
                    "cluster.x-k8s.io/owner-kind": "MachineSet",
                    "cluster.x-k8s.io/owner-name": ms["metadata"]["name"],
                }
            )

        self.cluster.store.mutate("nodes", "", node, change)

    # -- the MachineSet controller, on the cluster's tick ------------------------------------

    def tick(self, now: datetime) -> None:
        store = self.cluster.store
        machines, _ = store.list(MACHINES)
        present = {m["metadata"]["name"] for m in machines}
        with self._lock:
            gone = {m: n for m, n in self._nodes.items() if m not in present}
            for name in gone:
                self._nodes.pop(name)
        for node in gone.values():
            if store.find("nodes", "", node) is not None:
                self.cluster.remove_node(node)
        for ms in store.list(MACHINESETS)[0]:
            self._scale(ms, [m for m in machines if self._owned(m, ms)], now)
        self._register(now)
        self._reboot_annotated(machines)

    def _reboot_annotated(self, machines: list[Obj]) -> None:
        """Power-cycle the host of each Machine carrying the reboot annotation, then drop it."""
        if self.reboot is None:
            return
        for m in machines:
            if REBOOT_ANNOTATION not in (m["metadata"].get("annotations") or {}):
                continue
            name = m["metadata"]["name"]

            def taken(obj: Obj) -> None:
                (obj["metadata"].get("annotations") or {}).pop(REBOOT_ANNOTATION, None)

            self.cluster.store.mutate(MACHINES, m["metadata"]["namespace"], name, taken)
            node = ((m.get("status") or {}).get("nodeRef") or {}).get("name")
            if node and self.cluster.store.find("nodes", "", node) is not None:
                self.reboot(node)

    @staticmethod
    def _owned(m: Obj, ms: Obj) -> bool:
        return bool(
            (m["metadata"].get("labels") or {}).get("cluster.x-k8s.io/set-name")
            == ms["metadata"]["name"]
        )

    def _paused(self, ms: Obj) -> str | None:
        """Why Cluster API's MachineSet controller would not reconcile `ms` (its `IsPaused`)."""
        name = ms["spec"].get("clusterName") or CLUSTER
        owner = self.cluster.store.find(CLUSTERS, ms["metadata"]["namespace"], name)
        if owner is not None and (owner.get("spec") or {}).get("paused") is True:
            return f"Cluster {name} is paused"
        value = (ms["metadata"].get("annotations") or {}).get(PAUSED)
        if value is not None and value != "false":
            return f"MachineSet {ms['metadata']['name']} has the {PAUSED} annotation"
        return None

    def _mark_paused(self, ms: Obj, why: str | None, now: datetime) -> None:
        """The `Paused` condition Cluster API keeps on each object (status.v1beta2)."""
        conditions = ((ms.get("status") or {}).get("v1beta2") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "Paused"), None)
        status = "True" if why else "False"
        if current is not None and current.get("status") == status:
            return
        condition = {
            "type": "Paused",
            "status": status,
            "reason": "Paused" if why else "NotPaused",
            "message": why or "",
            "lastTransitionTime": rfc3339(now),
        }

        def change(obj: Obj) -> None:
            v1beta2 = obj.setdefault("status", {}).setdefault("v1beta2", {})
            others = [c for c in v1beta2.get("conditions") or [] if c.get("type") != "Paused"]
            v1beta2["conditions"] = [*others, condition]

        self.cluster.store.mutate(
            MACHINESETS, ms["metadata"]["namespace"], ms["metadata"]["name"], change
        )

    def _scale(self, ms: Obj, owned: list[Obj], now: datetime) -> None:
        pool = (ms["metadata"].get("labels") or {}).get("cluster.x-k8s.io/deployment-name", "")
        why = self._paused(ms)
        self._mark_paused(ms, why, now)
        paused = why is not None
        live = [m for m in owned if not m["metadata"].get("deletionTimestamp")]
        missing = int(ms["spec"].get("replicas") or 0) - len(live)
        for index in range(max(0, missing) if not paused else 0):
            seed = f"{ms['metadata']['name']}/{now.isoformat()}/{index}/{len(owned)}"
            name = f"{ms['metadata']['name']}-{name_suffix(seed)}"
            self.cluster.store.create(MACHINES, machine(name, pool, ms, None))
            fault = self._take_fault(pool)
            with self._lock:
                self._due[name] = now + timedelta(seconds=self.provision_delay)
                if fault:
                    self._faults[name] = fault

    def _take_fault(self, pool: str) -> str | None:
        """The first launch fault queued on the pool's MachineDeployment, taken off the queue."""
        taken: list[str] = []

        def pop(md: Obj) -> Obj | None:
            annotations = md["metadata"].get("annotations") or {}
            queue = [f.strip() for f in annotations.get(LAUNCH_FAULTS, "").split(",") if f.strip()]
            if not queue:
                return None
            taken.append(queue[0])
            if queue[1:]:
                annotations[LAUNCH_FAULTS] = ",".join(queue[1:])
            else:
                annotations.pop(LAUNCH_FAULTS)
            return md

        if self.cluster.store.find(DEPLOYMENTS, NAMESPACE, pool) is None:
            return None
        self.cluster.store.mutate(DEPLOYMENTS, NAMESPACE, pool, pop)
        return taken[0] if taken and taken[0] in LAUNCH_FAULT_KINDS else None

    def _register(self, now: datetime) -> None:
        with self._lock:
            ready = [m for m, due in self._due.items() if due <= now]
            faults = {m: self._faults.pop(m) for m in ready if m in self._faults}
            for name in ready:
                self._due.pop(name)
        store = self.cluster.store
        for name in ready:
            obj = store.find(MACHINES, NAMESPACE, name)
            if obj is None:
                continue
            labels = obj["metadata"].get("labels") or {}
            pool = labels.get("cluster.x-k8s.io/deployment-name", "")
            ms = store.find(MACHINESETS, NAMESPACE, labels.get("cluster.x-k8s.io/set-name", ""))
            if ms is None:
                continue
            if faults.get(name) == "insufficient_capacity":
                failed = failed_status(name, "sim-zone-a", rfc3339(now))

                def fail(m: Obj, status: Obj = failed) -> None:
                    m["status"] = status

                store.mutate(MACHINES, NAMESPACE, name, fail)
                continue
            node_labels, gpus = self._templates.get(pool, ({}, 0))
            ready_after = NEVER if faults.get(name) == "never_ready" else 0.0
            node = self.cluster.add_node(
                name, pool, gpus, labels=dict(node_labels), ready_after=ready_after
            )
            self._annotate(name, name, ms)

            status = machine(name, pool, ms, node)["status"]

            def running(m: Obj, status: Obj = status) -> None:
                m["status"] = status

            store.mutate(MACHINES, NAMESPACE, name, running)
            with self._lock:
                self._nodes[name] = name
