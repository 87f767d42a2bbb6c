"""The simulator's authorizer, as the real RBAC one decides: ClusterRoleBindings everywhere,
RoleBindings in their namespace only (a ClusterRole through a RoleBinding too), resourceNames
never matching a create or a list, wildcards and subresources."""

from __future__ import annotations

from typing import Any

from remediator.sim.kube.api.rbac import Rbac, User

RBAC = "rbac.authorization.k8s.io/v1"
LEASES = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}
SA = User.service_account("ops", "ctl")


def objects() -> list[dict[str, Any]]:
    subject = [{"kind": "ServiceAccount", "name": "ctl", "namespace": "ops"}]
    return [
        {
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "nodes"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "anything-batch"},
            "rules": [{"apiGroups": ["batch"], "resources": ["*"], "verbs": ["*"]}],
        },
        {
            "apiVersion": RBAC,
            "kind": "Role",
            "metadata": {"name": "lease"},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["create"],
                },
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "resourceNames": ["mine"],
                    "verbs": ["get", "update"],
                },
            ],
        },
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "nodes"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "nodes"},
            "subjects": subject,
        },
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": "lease"},  # no namespace: the manifests' default
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "lease"},
            "subjects": subject,
        },
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": "batch", "namespace": "jobs"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "anything-batch"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts:ops"}],
        },
    ]


def test_bindings_grant_where_they_reach() -> None:
    rbac = Rbac.from_objects(objects(), "ops")
    allowed = rbac.authorize
    assert allowed(SA, "", "nodes", "list", "", "").allowed
    assert not allowed(SA, "", "nodes", "patch", "", "n1").allowed
    assert allowed(SA, "", "pods/eviction", "create", "default", "p").allowed
    assert not allowed(SA, "", "pods", "create", "default", "").allowed
    decision = allowed(SA, "", "nodes", "get", "", "n1")
    assert decision.reason == (
        'RBAC: allowed by ClusterRoleBinding "nodes" of ClusterRole "nodes" to '
        'ServiceAccount "ops/ctl"'
    )
    # The Role: in its own namespace only, the named verbs on the one name only.
    assert allowed(SA, "coordination.k8s.io", "leases", "create", "ops", "").allowed
    assert allowed(SA, "coordination.k8s.io", "leases", "update", "ops", "mine").allowed
    assert not allowed(SA, "coordination.k8s.io", "leases", "update", "ops", "theirs").allowed
    assert not allowed(SA, "coordination.k8s.io", "leases", "get", "ops", "").allowed
    assert not allowed(SA, "coordination.k8s.io", "leases", "create", "other", "").allowed
    # A ClusterRole through a RoleBinding to the account's group: wildcards, one namespace.
    assert allowed(SA, "batch", "jobs", "delete", "jobs", "j").allowed
    assert not allowed(SA, "batch", "jobs", "delete", "ops", "j").allowed
    assert not allowed(User("someone", ()), "", "nodes", "list", "", "").allowed


def test_a_token_is_issued_for_each_bound_service_account() -> None:
    rbac = Rbac.from_objects(objects(), "ops")
    (token,) = rbac.accounts().values()
    assert list(rbac.accounts()) == ["ops/ctl"]
    assert rbac.tokens[token] == SA
