"""Where a pending pod goes: the default scheduler's filters that matter on a GPU fleet (node
readiness, cordon, taints, nodeSelector, free `nvidia.com/gpu`, pod count) and a deterministic
score (spread a controller's pods, then least allocated, then name). Gangs are placed all or
nothing, as a gang scheduler does. Pure: callers pass node views and current usage."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from remediator.sim.kube.api.kobj import (
    GPU_RESOURCE,
    UNSCHEDULABLE_TAINT,
    condition,
    gpu_request,
    tolerates,
)
from remediator.sim.kube.api.store import Obj


@dataclass(frozen=True)
class NodeView:
    """What the scheduler reads of a node."""

    name: str
    ready: bool
    unschedulable: bool
    taints: tuple[Obj, ...]
    labels: Mapping[str, str]
    gpus: int
    max_pods: int

    @classmethod
    def of(cls, node: Obj) -> NodeView:
        ready = condition(node, "Ready")
        allocatable = node.get("status", {}).get("allocatable") or {}
        return cls(
            name=node["metadata"]["name"],
            ready=ready is not None and ready.get("status") == "True",
            unschedulable=bool(node.get("spec", {}).get("unschedulable")),
            taints=tuple(node.get("spec", {}).get("taints") or ()),
            labels=dict(node["metadata"].get("labels") or {}),
            gpus=int(allocatable.get(GPU_RESOURCE, 0)),
            max_pods=int(allocatable.get("pods", 110)),
        )


@dataclass
class Usage:
    """GPUs and pod slots taken on each node, and how many of each owner's pods sit there."""

    gpus: dict[str, int] = field(default_factory=dict)
    pods: dict[str, int] = field(default_factory=dict)
    owners: dict[str, Counter[str]] = field(default_factory=dict)  # owner uid -> node -> count

    def add(self, node: str, gpus: int, owner: str | None, sign: int = 1) -> None:
        self.gpus[node] = self.gpus.get(node, 0) + sign * gpus
        self.pods[node] = self.pods.get(node, 0) + sign
        if owner:
            self.owners.setdefault(owner, Counter())[node] += sign


def unfit_reason(pod: Obj, node: NodeView, usage: Usage, gpus: int) -> str | None:
    """Why the pod cannot go to the node (the scheduler's own wording), or None if it can."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    if not node.ready:
        return "node(s) were not ready"
    if node.unschedulable and not tolerates(
        tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    ):
        return "node(s) were unschedulable"
    for taint in node.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            value = taint.get("value")
            shown = f"{taint['key']}: {value}" if value else taint["key"]
            return f"node(s) had untolerated taint {{{shown}}}"
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return "node(s) didn't match Pod's node affinity/selector"
    if usage.pods.get(node.name, 0) + 1 > node.max_pods:
        return "Too many pods"
    if gpus and usage.gpus.get(node.name, 0) + gpus > node.gpus:
        return f"Insufficient {GPU_RESOURCE}"
    return None


def _score(node: NodeView, usage: Usage, owner: str | None) -> tuple[int, float, int, str]:
    spread = usage.owners[owner][node.name] if owner in usage.owners else 0
    allocated = usage.gpus.get(node.name, 0) / node.gpus if node.gpus else 0.0
    return spread, allocated, usage.pods.get(node.name, 0), node.name


def pick_node(
    pod: Obj,
    candidates: Iterable[NodeView],
    usage: Usage,
    owner: str | None,
    every_node: Iterable[NodeView] | None = None,
) -> tuple[str | None, str]:
    """The best node among `candidates` (every node, or a subset already known to carry the
    pod's nodeSelector labels), or None and the scheduler's "0/N nodes are available" message
    over `every_node`. Free GPUs are checked first: on a busy fleet that rules out most nodes
    at the cost of one lookup."""
    gpus = gpu_request(pod)
    best: tuple[tuple[int, float, int, str], str] | None = None
    for node in candidates:
        if gpus and usage.gpus.get(node.name, 0) + gpus > node.gpus:
            continue
        if unfit_reason(pod, node, usage, gpus) is None:
            score = _score(node, usage, owner)
            if best is None or score < best[0]:
                best = (score, node.name)
    if best is not None:
        return best[1], ""
    return None, explain(pod, candidates if every_node is None else every_node, usage, gpus)


def explain(pod: Obj, nodes: Iterable[NodeView], usage: Usage, gpus: int) -> str:
    """Why no node fits, each node counted under its first failing filter."""
    reasons: Counter[str] = Counter()
    total = 0
    for node in nodes:
        total += 1
        reason = unfit_reason(pod, node, usage, gpus)
        if reason is not None:
            reasons[reason] += 1
    detail = ", ".join(
        f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"0/{total} nodes are available: {detail}." if detail else "0/0 nodes are available."


def affinity_keys(pod: Obj) -> list[str]:
    """The topology keys of the pod's required pod-affinity terms."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    return [t["topologyKey"] for t in terms if t.get("topologyKey")]


def _place_members(
    pods: list[Obj],
    candidates: list[NodeView],
    usage: Usage,
    owner: str | None,
    every_node: list[NodeView] | None,
) -> tuple[dict[str, str] | None, str]:
    placed: dict[str, str] = {}
    taken: list[tuple[str, int]] = []
    message = ""
    for pod in pods:
        name, message = pick_node(pod, candidates, usage, owner, every_node)
        if name is None:
            break
        gpus = gpu_request(pod)
        usage.add(name, gpus, owner)
        taken.append((name, gpus))
        placed[pod["metadata"]["name"]] = name
    for name, gpus in taken:
        usage.add(name, gpus, owner, sign=-1)
    if len(placed) < len(pods):
        return None, message
    return placed, ""


def place_gang(
    pods: list[Obj],
    candidates: list[NodeView],
    usage: Usage,
    owner: str | None,
    every_node: list[NodeView] | None = None,
) -> tuple[dict[str, str] | None, str]:
    """Nodes for every member (pod name -> node), or None when the whole gang does not fit;
    `usage` is left as it was either way. A gang whose members require pod affinity to each
    other on a topology key (`nvidia.com/gpu.clique`) goes whole into one domain of that key:
    the fullest one it fits in (so a clique whose spare was just taken into service gets its
    gang back), then by the key's value. Its first member matches its own selector, which
    Kubernetes lets go anywhere; the others then follow it."""
    keys = affinity_keys(pods[0]) if pods else []
    if not keys:
        placed, message = _place_members(pods, candidates, usage, owner, every_node)
        return placed, "" if placed else f"gang of {len(pods)} does not fit: {message}"
    domains: dict[tuple[str, ...], list[NodeView]] = {}
    for node in candidates:
        values = tuple(node.labels.get(k, "") for k in keys)
        if all(values):
            domains.setdefault(values, []).append(node)
    gpus = gpu_request(pods[0])

    def free(nodes: list[NodeView]) -> int:
        return sum(1 for n in nodes if unfit_reason(pods[0], n, usage, gpus) is None)

    ranked = sorted(
        ((free(nodes), value, nodes) for value, nodes in domains.items()),
        key=lambda item: (item[0], item[1]),
    )
    for count, _, nodes in ranked:
        if count < len(pods):
            continue
        placed, _message = _place_members(pods, nodes, usage, owner, every_node)
        if placed is not None:
            return placed, ""
    most = max((count for count, _, _ in ranked), default=0)
    return None, (
        f"gang of {len(pods)} does not fit in any one {'/'.join(keys)} domain "
        f"(at most {most} fitting nodes in one of {len(domains)}): "
        + explain(pods[0], candidates if every_node is None else every_node, usage, gpus)
    )
