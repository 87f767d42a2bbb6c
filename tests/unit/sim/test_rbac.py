"""The simulator's authorizer, as the real RBAC one decides: ClusterRoleBindings everywhere,
RoleBindings in their namespace only (a ClusterRole through a RoleBinding too), resourceNames
never matching a create or a list, wildcards and subresources; the bootstrap roles every user
gets (anonymous: /version and health only) and system:masters; the rules a rules review lists."""

from __future__ import annotations

from typing import Any

from remediator.sim.kube.api.rbac import ADMIN, ANONYMOUS, Decision, Rbac, User

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


def test_bootstrap_roles_reach_every_user_as_on_a_real_apiserver() -> None:
    rbac = Rbac.from_objects(objects(), "ops")
    # system:public-info-viewer: anonymous too; nothing else for anonymous.
    assert rbac.authorize_path(ANONYMOUS, "/version", "get").allowed
    assert rbac.authorize_path(ANONYMOUS, "/healthz", "get").allowed
    assert not rbac.authorize_path(ANONYMOUS, "/api", "get").allowed
    assert not rbac.authorize(ANONYMOUS, "", "nodes", "list", "", "").allowed
    create_review = ("authorization.k8s.io", "selfsubjectaccessreviews", "create", "", "")
    assert not rbac.authorize(ANONYMOUS, *create_review).allowed
    # system:discovery and system:basic-user: every authenticated user.
    assert rbac.authorize_path(SA, "/apis/batch/v1", "get").allowed
    assert not rbac.authorize_path(SA, "/apis/batch/v1", "post").allowed
    assert not rbac.authorize_path(SA, "/metrics", "get").allowed
    assert rbac.authorize(SA, *create_review).reason == (
        'RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole '
        '"system:basic-user" to Group "system:authenticated"'
    )
    # system:masters: everything, with no RBAC reason (it never reaches RBAC).
    assert rbac.authorize(ADMIN, "", "nodes", "delete", "", "n1") == Decision(True)
    assert rbac.authorize_path(ADMIN, "/metrics", "get").allowed


def test_rules_of_a_user_are_what_reaches_it_in_the_namespace() -> None:
    rbac = Rbac.from_objects(objects(), "ops")
    in_ops = [rule.to_review() for rule in rbac.rules_of(SA, "ops")]
    assert {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["nodes"]} in in_ops
    assert {
        "verbs": ["get", "update"],
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["mine"],
    } in in_ops
    public = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    assert {"verbs": ["get"], "nonResourceURLs": public} in in_ops
    in_jobs = [rule.to_review() for rule in rbac.rules_of(SA, "jobs")]
    assert {"verbs": ["*"], "apiGroups": ["batch"], "resources": ["*"]} in in_jobs
    assert not any(rule.get("apiGroups") == ["coordination.k8s.io"] for rule in in_jobs)
    admin = [rule.to_review() for rule in rbac.rules_of(ADMIN, "ops")]
    assert admin[:2] == [
        {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
        {"verbs": ["*"], "nonResourceURLs": ["*"]},
    ]
