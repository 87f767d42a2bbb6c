"""Every Kubernetes permission the controller's code uses, in one place.

deploy/ (the Kustomize base, the Cluster API component and the Helm chart) grants exactly these
and nothing more (tests/integration/test_manifests.py holds both to this list), the simulator
enforces what deploy/ grants (sim/kube/api/rbac.py), and `remediator doctor` asks the cluster
about each one with a SelfSubjectAccessReview. A new API call in kube/client.py without a line
here fails a test against the simulator instead of a user's cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scope = Literal["cluster", "own-namespace"]


@dataclass(frozen=True)
class Permission:
    """One verb on one resource, and why the controller needs it. `scope` "own-namespace" is the
    controller's namespace (leader election); `name` limits it to one object (the Lease)."""

    group: str
    resource: str
    verb: str
    why: str
    scope: Scope = "cluster"
    name: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.verb)

    def describe(self) -> str:
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f" {self.name}" if self.name else ""
        return f"{self.verb} {resource}{where}"


def _each(
    group: str,
    resource: str,
    verbs: tuple[str, ...],
    why: str,
    scope: Scope = "cluster",
    name: str = "",
) -> tuple[Permission, ...]:
    return tuple(Permission(group, resource, verb, why, scope, name) for verb in verbs)


# The ClusterRole `remediator` (deploy/base/clusterrole.yaml, the chart's clusterrole.yaml).
CLUSTER: tuple[Permission, ...] = (
    *_each(
        "",
        "nodes",
        ("get", "list", "watch", "patch"),
        "the node informer; cordon, taints and annotations",
    ),
    *_each("", "pods", ("get", "list"), "pods on a node: drain, opt-out labels"),
    Permission("", "pods", "watch", "waits that end when a pod on the node changes"),
    Permission("", "pods", "patch", "ask a pod for a checkpoint (an annotation)"),
    Permission("", "pods", "delete", "a pod stuck terminating past its grace"),
    Permission("", "pods/eviction", "create", "drain: evict through PodDisruptionBudgets"),
    Permission("", "events", "create", "Events on nodes and pods for kubectl describe"),
    Permission("policy", "poddisruptionbudgets", "list", "name the budget a refused eviction hit"),
    *_each(
        "batch",
        "jobs",
        ("create", "get", "list", "watch", "delete"),
        "repair Jobs (GPU reset, DCGM diagnostics, reboot)",
    ),
    Permission("", "pods/log", "get", "the DCGM diagnostics' JSON in a repair pod's log"),
    Permission(
        "",
        "namespaces",
        "get",
        "the kube-system namespace's UID: the cluster's identity in a shared database",
        name="kube-system",
    ),
)

# The Role `remediator-leader-election` in the controller's namespace.
LEADER: tuple[Permission, ...] = (
    Permission("coordination.k8s.io", "leases", "create", "leader election", "own-namespace"),
    *_each(
        "coordination.k8s.io",
        "leases",
        ("get", "update"),
        "leader election",
        scope="own-namespace",
        name="remediator-leader",
    ),
)

# Added to the ClusterRole for `provider.type: clusterapi` (deploy/components/clusterapi, the
# chart's clusterApi.rbac).
CLUSTER_API: tuple[Permission, ...] = (
    *_each(
        "cluster.x-k8s.io",
        "machines",
        ("get", "list", "watch", "patch", "delete"),
        "find a node's Machine, annotate it, delete it to replace the node",
    ),
    *_each(
        "cluster.x-k8s.io",
        "machinesets",
        ("get", "list", "watch", "patch"),
        "the pool a Machine belongs to, and its spare capacity",
    ),
    *_each(
        "cluster.x-k8s.io",
        "machinedeployments",
        ("get", "list", "watch"),
        "pools named after MachineDeployments",
    ),
    *_each("cluster.x-k8s.io", "clusters", ("get", "list"), "a paused Cluster holds remediation"),
)


def required(provider_type: str, lease_name: str = "remediator-leader") -> tuple[Permission, ...]:
    """What this configuration of the controller needs, the Lease under its configured name."""
    leader = tuple(
        Permission(p.group, p.resource, p.verb, p.why, p.scope, lease_name if p.name else "")
        for p in LEADER
    )
    extra = CLUSTER_API if provider_type == "clusterapi" else ()
    return (*CLUSTER, *extra, *leader)


def grants(permissions: tuple[Permission, ...]) -> set[tuple[str, str, str]]:
    return {p.key for p in permissions}
