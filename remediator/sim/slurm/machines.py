"""Slurm nodes follow the simulated machines: each Kubernetes node carries the label naming its
Slurm node; when a machine is removed its slurmd stops, and the replacement machine that joins
the pool runs slurmd under the freed static name (the "same static name" way a replaced machine
rejoins Slurm), labelled so that the controller's mapping finds it. A daemon that dies (slurmctld
killed, a slurmd crashed) is reaped and reported on the simulator's stderr, never restarted: a
test that stops slurmctld wants it down."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from remediator.sim.kube.api.store import NotFound, Obj, ObjectStore
from remediator.sim.slurm.cluster import SlurmCluster

SLURM_NODE_LABEL = "slurm.remediator.io/node-name"
POLL_SECONDS = 0.2

log = logging.getLogger(__name__)


class MachineFollower:
    def __init__(self, store: ObjectStore, slurm: SlurmCluster) -> None:
        self._store = store
        self._slurm = slurm
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="slurm-machines")
        self.hosts: dict[str, str | None] = dict.fromkeys(slurm.nodes)  # Slurm → Kubernetes

    def start(self) -> None:
        for name in self._slurm.nodes:
            if self._store.find("nodes", "", name) is not None:
                self._label(name, name)
                self.hosts[name] = name
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def follow(self) -> None:
        """One look: free the Slurm names of machines gone, give them to machines new."""
        nodes, _ = self._store.list("nodes")
        present = {n["metadata"]["name"]: n for n in nodes}
        for slurm_name, host in self.hosts.items():
            if host is not None and host not in present:
                self._slurm.stop_node(slurm_name)
                self.hosts[slurm_name] = None
        taken = {h for h in self.hosts.values() if h}
        for name, node in present.items():
            labels = node["metadata"].get("labels") or {}
            if name in taken or SLURM_NODE_LABEL in labels:
                continue
            free = next((s for s, h in self.hosts.items() if h is None), None)
            if free is None:
                return
            self._label(name, free)
            self.hosts[free] = name
            self._slurm.start_node(free)

    def _label(self, kube_node: str, slurm_node: str) -> None:
        def change(obj: Obj) -> None:
            obj["metadata"].setdefault("labels", {})[SLURM_NODE_LABEL] = slurm_node

        self._store.mutate("nodes", "", kube_node, change)

    def _run(self) -> None:
        # One thread both follows and reaps: the cluster's daemon table is not shared.
        while not self._stop.wait(POLL_SECONDS):
            for gone in self._slurm.reap():
                log.warning("sim slurm: %s", gone.describe())
            try:
                self.follow()
            except NotFound:
                continue  # a machine went between the list and the label: look again


class SimSlurm:
    """`sim serve --slurm`: the Slurm cluster named after the seeded nodes, and its follower."""

    def __init__(self, store: ObjectStore, root: Path) -> None:
        nodes, _ = store.list("nodes")
        names = tuple(sorted(n["metadata"]["name"] for n in nodes))
        self.cluster = SlurmCluster(root, names)
        self._follower = MachineFollower(store, self.cluster)

    def start(self) -> dict[str, Any]:
        """Start it; the ready file's `slurm` object (valid as the controller's `slurm:`)."""
        self.cluster.start()
        self._follower.start()
        return {"slurm": {**self.cluster.settings(), "node_label": SLURM_NODE_LABEL}}

    def stop(self) -> None:
        self._follower.stop()
        self.cluster.stop()
