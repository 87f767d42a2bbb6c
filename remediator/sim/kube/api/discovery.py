"""What the simulated API server serves, and the discovery documents that announce it.

kubectl and client-go find every resource through discovery (`/api`, `/api/v1`, `/apis`, …); the
documents here have the shapes a real 1.32 server returns (legacy, unaggregated JSON, which clients
fall back to when the server does not offer aggregated discovery).
"""

from __future__ import annotations

from dataclasses import dataclass

from remediator.sim.kube.api.store import Obj

KUBE_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4",
    "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T16:02:27Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_CRUD = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    """One served resource. `key` is the ObjectStore resource name ("pods", "apps/daemonsets")."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = _CRUD
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        return self.group, self.version


RESOURCES: tuple[Resource, ...] = (
    Resource(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        ("ns",),
        ("create", "delete", "get", "list", "patch", "update", "watch"),
        subresources=("status",),
    ),
    Resource("", "v1", "nodes", "node", "Node", False, ("no",), subresources=("status",)),
    Resource(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        ("po",),
        categories=("all",),
        subresources=("status", "eviction", "log"),
    ),
    Resource("", "v1", "events", "event", "Event", True, ("ev",)),
    Resource(
        "apps",
        "v1",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        True,
        ("ds",),
        categories=("all",),
        subresources=("status",),
    ),
    Resource(
        "apps",
        "v1",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        True,
        ("rs",),
        categories=("all",),
        subresources=("status",),
    ),
    Resource(
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        True,
        ("deploy",),
        categories=("all",),
        subresources=("status",),
    ),
    Resource(
        "batch", "v1", "jobs", "job", "Job", True, (), categories=("all",), subresources=("status",)
    ),
    Resource(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        subresources=("status",),
    ),
    Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    # Answered by the RBAC middleware (rbac_http.py), never stored.
    Resource(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "",
        "SelfSubjectAccessReview",
        False,
        verbs=("create",),
    ),
    Resource(
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "",
        "SelfSubjectRulesReview",
        False,
        verbs=("create",),
    ),
    # Cluster API, as its CRDs serve it (`sim serve --cloud clusterapi` runs the controllers).
    *(
        Resource(
            "cluster.x-k8s.io",
            "v1beta1",
            plural,
            plural[:-1],
            kind,
            True,
            (short,),
            categories=("cluster-api",),
            subresources=("status",),
        )
        for plural, kind, short in (
            ("machines", "Machine", "ma"),
            ("machinesets", "MachineSet", "ms"),
            ("machinedeployments", "MachineDeployment", "md"),
            ("clusters", "Cluster", "cl"),
        )
    ),
    # Metal3's hosts, stored as served (no controller): what a quarantined machine's hold marks.
    Resource(
        "metal3.io",
        "v1alpha1",
        "baremetalhosts",
        "baremetalhost",
        "BareMetalHost",
        True,
        ("bmh",),
        categories=("metal3",),
        subresources=("status",),
    ),
)

BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
BY_KEY: dict[str, Resource] = {r.key: r for r in RESOURCES}
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(r.group for r in RESOURCES if r.group))

_SUB_VERBS = {"status": ["get", "patch", "update"], "eviction": ["create"]}


def _entry(r: Resource) -> Obj:
    entry: Obj = {
        "name": r.plural,
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": list(r.verbs),
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    return entry


def _subresource_entry(r: Resource, sub: str) -> Obj:
    if sub == "log":
        return {
            "name": f"{r.plural}/log",
            "singularName": "",
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": ["get"],
        }
    if sub == "eviction":
        return {
            "name": f"{r.plural}/eviction",
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "group": "policy",
            "version": "v1",
            "kind": "Eviction",
            "verbs": _SUB_VERBS[sub],
        }
    return {
        "name": f"{r.plural}/{sub}",
        "singularName": r.singular,
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": _SUB_VERBS[sub],
    }


def resource_list(group: str, version: str) -> Obj | None:
    """The APIResourceList of one group/version, or None when it is not served."""
    members = [r for r in RESOURCES if r.group_version == (group, version)]
    if not members:
        return None
    resources: list[Obj] = []
    for r in members:
        resources.append(_entry(r))
        resources.extend(_subresource_entry(r, sub) for sub in r.subresources)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group(group: str) -> Obj | None:
    versions = sorted({r.version for r in RESOURCES if r.group == group and group})
    if not versions:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def api_group_list() -> Obj:
    groups = []
    for group in GROUPS:
        body = api_group(group)
        if body is not None:
            body.pop("kind")
            body.pop("apiVersion")
            groups.append(body)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
