"""The simulator's informer cache: the latest object of every watched kind, fed by the store's
watch events, with the lookups the kubelet, scheduler and controllers need (pods by node, by
owner, by label; budgets by label; GPU usage per node) so that each tick does work in
proportion to what changed instead of rescanning thousands of pods."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from remediator.sim.kube.api.kobj import (
    controller_ref,
    equality_anchor,
    gpu_request,
    is_terminal,
    is_terminating,
    key_of,
    labels_of,
    selector_matches,
)
from remediator.sim.kube.api.store import Obj, WatchEvent
from remediator.sim.kube.controllers.scheduling import NodeView, Usage

Key = tuple[str, str]
LabelKey = tuple[str, str, str]  # namespace, label, value
K = TypeVar("K")
V = TypeVar("V")

WATCHED = (
    "nodes",
    "pods",
    "apps/replicasets",
    "apps/daemonsets",
    "apps/deployments",
    "batch/jobs",
    "policy/poddisruptionbudgets",
)


def _add(index: dict[K, set[V]], name: K, key: V) -> None:
    index.setdefault(name, set()).add(key)


def _discard(index: dict[K, set[V]], name: K, key: V) -> None:
    bucket = index.get(name)
    if bucket is not None:
        bucket.discard(key)
        if not bucket:
            del index[name]


def _placement(pod: Obj) -> tuple[str, int, str | None] | None:
    """The node resources a pod holds: bound and not finished (terminating pods still hold them)."""
    node = pod.get("spec", {}).get("nodeName")
    if not node or is_terminal(pod):
        return None
    ref = controller_ref(pod)
    return node, gpu_request(pod), ref["uid"] if ref else None


@dataclass
class ClusterIndex:
    nodes: dict[str, Obj] = field(default_factory=dict)
    views: dict[str, NodeView] = field(default_factory=dict)
    nodes_by_label: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    pods: dict[Key, Obj] = field(default_factory=dict)
    pods_by_node: dict[str, set[Key]] = field(default_factory=dict)
    pods_by_owner: dict[str, set[Key]] = field(default_factory=dict)
    pods_by_label: dict[LabelKey, set[Key]] = field(default_factory=dict)
    pods_by_namespace: dict[str, set[Key]] = field(default_factory=dict)
    pending: dict[Key, None] = field(default_factory=dict)  # unbound, not terminating; ordered
    usage: Usage = field(default_factory=Usage)
    owners: dict[str, dict[Key, Obj]] = field(default_factory=dict)  # resource -> key -> obj
    owner_keys: dict[str, tuple[str, Key]] = field(default_factory=dict)  # uid -> (resource, key)
    children: dict[str, set[tuple[str, Key]]] = field(default_factory=dict)  # owner uid -> objects
    pdbs: dict[Key, Obj] = field(default_factory=dict)
    pdbs_by_label: dict[LabelKey, set[Key]] = field(default_factory=dict)
    pdbs_unanchored: dict[str, set[Key]] = field(default_factory=dict)

    def apply(self, event: WatchEvent) -> Obj | None:
        """Fold one watch event in; returns the object as it was before (None if new)."""
        obj = event.object
        key = key_of(obj)
        gone = event.type == "DELETED"
        if event.resource == "pods":
            return self._apply_pod(key, None if gone else obj)
        if event.resource == "nodes":
            old = self.nodes.pop(key[1], None)
            self.views.pop(key[1], None)
            if old is not None:
                for label, value in labels_of(old).items():
                    _discard(self.nodes_by_label, (label, value), key[1])
            if not gone:
                self.nodes[key[1]] = obj
                self.views[key[1]] = NodeView.of(obj)
                for label, value in labels_of(obj).items():
                    _add(self.nodes_by_label, (label, value), key[1])
            return old
        if event.resource == "policy/poddisruptionbudgets":
            return self._apply_pdb(key, None if gone else obj)
        bucket = self.owners.setdefault(event.resource, {})
        old = bucket.pop(key, None)
        if old is not None:
            self.owner_keys.pop(old["metadata"]["uid"], None)
            parent = controller_ref(old)
            if parent:
                _discard(self.children, parent["uid"], (event.resource, key))
        if not gone:
            bucket[key] = obj
            self.owner_keys[obj["metadata"]["uid"]] = (event.resource, key)
            parent = controller_ref(obj)
            if parent:
                _add(self.children, parent["uid"], (event.resource, key))
        return old

    def _apply_pod(self, key: Key, pod: Obj | None) -> Obj | None:
        old = self.pods.pop(key, None)
        if old is not None:
            self._unindex_pod(key, old)
        if pod is not None:
            self.pods[key] = pod
            self._index_pod(key, pod)
        return old

    def _index_pod(self, key: Key, pod: Obj) -> None:
        node = pod.get("spec", {}).get("nodeName")
        if node:
            _add(self.pods_by_node, node, key)
        elif not is_terminating(pod):
            self.pending[key] = None
        ref = controller_ref(pod)
        if ref:
            _add(self.pods_by_owner, ref["uid"], key)
        for label, value in labels_of(pod).items():
            _add(self.pods_by_label, (key[0], label, value), key)
        _add(self.pods_by_namespace, key[0], key)
        placed = _placement(pod)
        if placed:
            self.usage.add(*placed)

    def _unindex_pod(self, key: Key, pod: Obj) -> None:
        node = pod.get("spec", {}).get("nodeName")
        if node:
            _discard(self.pods_by_node, node, key)
        self.pending.pop(key, None)
        ref = controller_ref(pod)
        if ref:
            _discard(self.pods_by_owner, ref["uid"], key)
        for label, value in labels_of(pod).items():
            _discard(self.pods_by_label, (key[0], label, value), key)
        _discard(self.pods_by_namespace, key[0], key)
        placed = _placement(pod)
        if placed:
            self.usage.add(*placed, sign=-1)

    def _apply_pdb(self, key: Key, pdb: Obj | None) -> Obj | None:
        old = self.pdbs.pop(key, None)
        if old is not None:
            anchor = equality_anchor(old.get("spec", {}).get("selector"))
            if anchor:
                _discard(self.pdbs_by_label, (key[0], *anchor), key)
            else:
                _discard(self.pdbs_unanchored, key[0], key)
        if pdb is not None:
            self.pdbs[key] = pdb
            anchor = equality_anchor(pdb.get("spec", {}).get("selector"))
            if anchor:
                _add(self.pdbs_by_label, (key[0], *anchor), key)
            else:
                _add(self.pdbs_unanchored, key[0], key)
        return old

    # -- lookups ---------------------------------------------------------------------------

    def owner(self, uid: str) -> tuple[str, Obj] | None:
        found = self.owner_keys.get(uid)
        if found is None:
            return None
        resource, key = found
        return resource, self.owners[resource][key]

    def pods_of_owner(self, uid: str) -> list[Obj]:
        return [self.pods[k] for k in sorted(self.pods_by_owner.get(uid, ()))]

    def nodes_for(self, pod: Obj) -> list[NodeView]:
        """Nodes that carry the pod's nodeSelector labels (all of them when it has none)."""
        selector = pod.get("spec", {}).get("nodeSelector") or {}
        if not selector:
            return list(self.views.values())
        names = set.intersection(
            *(self.nodes_by_label.get((k, str(v)), set()) for k, v in selector.items())
        )
        return [self.views[n] for n in names if n in self.views]

    def pods_on_node(self, node: str) -> list[Obj]:
        return [self.pods[k] for k in sorted(self.pods_by_node.get(node, ()))]

    def pods_selected(self, namespace: str, selector: Obj | None) -> list[Obj]:
        """Pods in the namespace a metav1.LabelSelector picks, via the label index when it can."""
        anchor = equality_anchor(selector)
        if anchor:
            candidates = self.pods_by_label.get((namespace, *anchor), set())
        else:
            candidates = self.pods_by_namespace.get(namespace, set())
        return [
            self.pods[k]
            for k in sorted(candidates)
            if selector_matches(selector, labels_of(self.pods[k]))
        ]

    def pdbs_for_labels(self, namespace: str, labels: dict[str, str]) -> Iterator[Key]:
        """Budgets in the namespace whose selector matches these labels."""
        candidates: set[Key] = set(self.pdbs_unanchored.get(namespace, ()))
        for label, value in labels.items():
            candidates |= self.pdbs_by_label.get((namespace, label, value), set())
        for key in sorted(candidates):
            if selector_matches(self.pdbs[key].get("spec", {}).get("selector"), labels):
                yield key
