"""Kubernetes, nodes and policies: can the controller reach the API server and do every verb it
needs (asked with SelfSubjectAccessReview, from remediator/kube/rbac.py), do the configured pool
labels find pools, and does every policy select nodes, leave each pool a budget of one and give
each pool's GPU model an NCCL floor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from remediator.doctor.context import DoctorContext, is_gpu_node
from remediator.doctor.report import Finding, Status
from remediator.errors import PolicyError, RemediatorError
from remediator.kube import rbac
from remediator.kube.objects import Node
from remediator.model.gpus import GPU_PRODUCT_LABEL
from remediator.policy.budget import limit_for
from remediator.policy.floors import pool_floor_gaps
from remediator.policy.schema import Policy
from remediator.policy.startup import startup_taint_warning

K8S = "kubernetes"
RBAC_FIX = (
    "grant it in the ClusterRole `remediator` (deploy/base/clusterrole.yaml, or the Helm chart's "
    "templates/clusterrole.yaml; leases: the Role `remediator-leader-election`) as "
    "remediator/kube/rbac.py lists it, and re-apply"
)
# Where a pool label usually comes from, for the fix of a label that finds nothing.
POOL_LABELS = (
    "cloud.google.com/gke-nodepool (GKE), eks.amazonaws.com/nodegroup (EKS managed node groups), "
    "karpenter.sh/nodepool (Karpenter), cluster.x-k8s.io/deployment-name (Cluster API)"
)


def kubernetes(ctx: DoctorContext) -> list[Finding]:
    try:
        kube = ctx.kube.get()
        version = kube.server_version()
    except RemediatorError as exc:
        where = ctx.settings.kubeconfig or "the in-cluster service account"
        return [
            Finding(
                K8S,
                "reachable",
                Status.FAIL,
                f"GET /version with {where}: {exc}",
                "check `kubeconfig` (or run in the cluster with the remediator ServiceAccount) "
                "and that the API server is reachable",
            )
        ]
    findings = [
        Finding(K8S, "reachable", Status.PASS, f"API server {version.get('gitVersion', '?')}")
    ]
    minor = str(version.get("minor", "")).rstrip("+")
    if minor.isdigit() and int(minor) < 29:
        findings.append(
            Finding(
                K8S,
                "version",
                Status.WARN,
                f"Kubernetes 1.{minor}: older than the oldest release tested (1.29)",
                "upgrade the cluster, or watch the first remediations closely",
            )
        )
    election = ctx.settings.leader_election
    needed = rbac.required(ctx.settings.provider.type, election.lease_name)
    if not election.enabled:
        needed = tuple(p for p in needed if p.scope != "own-namespace")
    missing, allowed = [], 0
    for permission in needed:
        namespace = election.namespace if permission.scope == "own-namespace" else ""
        ok, _ = kube.access_review(
            permission.verb, permission.group, permission.resource, namespace, permission.name
        )
        if ok:
            allowed += 1
        else:
            where = f" in namespace {namespace}" if namespace else ""
            missing.append(f"{permission.describe()}{where} ({permission.why})")
    if missing:
        findings.append(
            Finding(
                K8S,
                "permissions",
                Status.FAIL,
                f"{len(missing)} of {len(needed)} verbs refused: " + "; ".join(missing),
                RBAC_FIX,
            )
        )
    else:
        findings.append(
            Finding(
                K8S,
                "permissions",
                Status.PASS,
                f"all {allowed} verbs allowed (SelfSubjectAccessReview)",
            )
        )
    return findings


def nodes(ctx: DoctorContext) -> list[Finding]:
    try:
        all_nodes = ctx.nodes.get()
    except RemediatorError as exc:
        return [Finding("nodes", "listed", Status.FAIL, str(exc), "see the kubernetes check")]
    gpu = [n for n in all_nodes if is_gpu_node(n)]
    label = ctx.settings.pool_label
    pools = ctx.pools()
    findings = []
    if not gpu:
        findings.append(
            Finding(
                "nodes",
                "GPU nodes",
                Status.FAIL,
                f"{len(all_nodes)} nodes, none with nvidia.com/gpu capacity",
                "install the NVIDIA device plugin (GPU Operator) so GPU nodes advertise "
                "nvidia.com/gpu",
            )
        )
        return findings
    if not pools:
        findings.append(
            Finding(
                "nodes",
                "pools",
                Status.FAIL,
                f"pool_label {label!r} is on none of the {len(gpu)} GPU nodes",
                f"set `pool_label` to the label your node pools carry, e.g. {POOL_LABELS}",
            )
        )
        return findings
    sizes = ", ".join(f"{pool} ({len(members)})" for pool, members in sorted(pools.items()))
    findings.append(
        Finding("nodes", "pools", Status.PASS, f"{len(pools)} pools by {label}: {sizes}")
    )
    loose = sorted(n.name for n in gpu if not n.labels.get(label))
    if loose:
        findings.append(
            Finding(
                "nodes",
                "GPU nodes without a pool",
                Status.WARN,
                f"{len(loose)} GPU nodes have no {label!r} label: {', '.join(loose[:10])}"
                + (" …" if len(loose) > 10 else ""),
                "label them, or accept that they are never replaced (no pool, no provider)",
            )
        )
    return findings


def policies(ctx: DoctorContext) -> list[Finding]:
    try:
        policy_set = ctx.policies.get()
    except PolicyError as exc:
        return [
            Finding(
                "policies",
                "valid",
                Status.FAIL,
                f"{ctx.settings.policies_dir}: " + "; ".join(exc.problems),
                "fix each named file:line:field (`remediator policy validate` says the same)",
            )
        ]
    findings = [
        Finding(
            "policies",
            "valid",
            Status.PASS,
            f"{len(policy_set.policies)} policies from {policy_set.source_dir}"
            + (f" at {policy_set.commit[:12]}" if policy_set.commit else ""),
        )
    ]
    for warning in policy_set.warnings:
        findings.append(Finding("policies", "valid", Status.WARN, warning, "check the XID code"))
    unfenced = startup_taint_warning(policy_set.policies, policy_set.settings)
    if unfenced:
        fix = (
            "register new machines with a taint (kubelet --register-with-taints, docs/"
            "validation.md) and name it as startup_taint in settings.yaml"
        )
        findings.append(Finding("policies", "startup taint", Status.WARN, unfenced, fix))
    try:
        pools = ctx.pools()
        all_nodes = ctx.nodes.get()
    except RemediatorError as exc:
        findings.append(
            Finding("policies", "selectors", Status.FAIL, f"cannot list nodes: {exc}", "")
        )
        return findings
    label = ctx.settings.pool_label
    idle = []
    for policy in policy_set.policies:
        selector = policy.nodes
        matched = [
            n
            for n in all_nodes
            if is_gpu_node(n)
            and (selector.pools is None or n.labels.get(label) in selector.pools)
            and all(n.labels.get(k) == v for k, v in selector.labels.items())
        ]
        if not matched:
            idle.append(policy.name)
    if idle:
        findings.append(
            Finding(
                "policies",
                "selectors",
                Status.FAIL,
                f"{len(idle)} policies select no GPU node: {', '.join(idle)}",
                "correct their `nodes.pools` / `nodes.labels` to values your nodes carry "
                f"(pools here: {', '.join(sorted(pools)) or 'none'})",
            )
        )
    else:
        findings.append(
            Finding("policies", "selectors", Status.PASS, "every policy selects GPU nodes")
        )
    findings.extend(floor_findings(policy_set.policies, pools))
    budget = policy_set.settings
    if not pools:
        findings.append(
            Finding("policies", "budgets", Status.SKIP, "no pools to size", "see the nodes check")
        )
        return findings
    starved = [
        f"{pool} ({len(members)} nodes)"
        for pool, members in sorted(pools.items())
        if (limit_for(budget.max_unhealthy.per_pool, len(members)) or 1) < 1
    ]
    cluster_limit = limit_for(budget.max_unhealthy.cluster, sum(len(m) for m in pools.values()))
    if starved or budget.max_concurrent < 1 or cluster_limit == 0:
        found = []
        if starved:
            found.append("max_unhealthy.per_pool allows 0 nodes in " + ", ".join(starved))
        if cluster_limit == 0:
            found.append("max_unhealthy.cluster allows 0 nodes")
        if budget.max_concurrent < 1:
            found.append("max_concurrent is 0")
        findings.append(
            Finding(
                "policies",
                "budgets",
                Status.FAIL,
                "; ".join(found) + ": no remediation could ever start there",
                "in settings.yaml give the limit a `min` of at least 1 (or a count ≥ 1)",
            )
        )
    else:
        findings.append(
            Finding("policies", "budgets", Status.PASS, "every pool may have at least 1 node out")
        )
    return findings


def floor_findings(policies: Sequence[Policy], pools: Mapping[str, list[Node]]) -> list[Finding]:
    """Pools whose GPU model (the nodes' nvidia.com/gpu.product) a validating policy that selects
    them has no NCCL floor for: a warning, since such a validation skips the check (the policy
    set stays valid), named so the gap is closed before a machine needs it."""
    labelled = {pool: [n.labels for n in members] for pool, members in pools.items()}
    if not any(GPU_PRODUCT_LABEL in labels for nodes in labelled.values() for labels in nodes):
        return [
            Finding(
                "policies",
                "NCCL floors",
                Status.SKIP,
                f"no GPU node carries {GPU_PRODUCT_LABEL}: the pools' GPU models are unknown",
                "run GPU feature discovery (the GPU operator), or check the floors with "
                "`remediator policy validate --gpu-model MODEL`",
            )
        ]
    gaps = pool_floor_gaps(policies, labelled)
    if not gaps:
        return [
            Finding(
                "policies",
                "NCCL floors",
                Status.PASS,
                "every pool's GPU model has a busbw_floor in each policy that validates it",
            )
        ]
    return [
        Finding(
            "policies",
            "NCCL floors",
            Status.WARN,
            f"{len(gaps)} pool GPU model(s) without a floor: "
            + "; ".join(g.describe() for g in gaps)
            + ": their validations skip the NCCL check (a warning on the timeline)",
            "give each named policy's validate step a busbw_floor for the model, in GB/s "
            "(about 80 % of a healthy node's all_reduce_perf bus bandwidth; docs/policies.md)",
        )
    ]
