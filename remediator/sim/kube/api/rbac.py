"""RBAC for the simulated API server: ClusterRoles, Roles and their bindings, loaded from
manifests (the project's own deploy/ by default) and decided as the real authorizer does.

A ClusterRoleBinding grants its ClusterRole everywhere, a RoleBinding grants its Role (or a
ClusterRole) in its own namespace; a rule matches on API group, resource (`pods/eviction` for a
subresource), verb and, when it names any, the object's name (never a create or a list, which
name no object); non-resource URLs (`/version`, `/api/*`) only through ClusterRoleBindings. The
apiserver's bootstrap roles are always there: every user, anonymous too, may read `/version` and
the health paths (system:public-info-viewer); every authenticated one discovery
(system:discovery) and its own access and rules reviews (system:basic-user). Members of
system:masters (the admin kubeconfig's user) are allowed everything. rbac_http.py applies this to
requests.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_RBAC = "rbac.authorization.k8s.io/v1"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
MASTERS = "system:masters"


@dataclass(frozen=True)
class Rule:
    """One PolicyRule, its lists in the manifest's order (a rules review returns them so)."""

    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()  # nonResourceURLs: a rule has these or resources, not both

    def allows(self, group: str, resource: str, verb: str, name: str) -> bool:
        if not (_has(self.groups, group) and _has(self.verbs, verb)):
            return False
        sub = resource.partition("/")[2]
        if not (_has(self.resources, resource) or (sub and f"*/{sub}" in self.resources)):
            return False
        return not self.names or name in self.names

    def allows_path(self, path: str, verb: str) -> bool:
        return _has(self.verbs, verb) and any(
            url == path or url == "*" or (url.endswith("*") and path.startswith(url[:-1]))
            for url in self.urls
        )

    def to_review(self) -> dict[str, list[str]]:
        """The ResourceRule or NonResourceRule of a SelfSubjectRulesReview."""
        if self.urls:
            return {"verbs": list(self.verbs), "nonResourceURLs": list(self.urls)}
        return {
            "verbs": list(self.verbs),
            "apiGroups": list(self.groups),
            "resources": list(self.resources),
            **({"resourceNames": list(self.names)} if self.names else {}),
        }


def _has(values: tuple[str, ...], value: str) -> bool:
    return value in values or "*" in values


@dataclass(frozen=True)
class Binding:
    kind: str  # ClusterRoleBinding or RoleBinding
    name: str
    namespace: str  # "" for a ClusterRoleBinding
    role_kind: str
    role: str
    subjects: tuple[tuple[str, str, str], ...]  # (kind, name, namespace)


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]

    @classmethod
    def service_account(cls, namespace: str, name: str) -> User:
        return cls(
            f"system:serviceaccount:{namespace}:{name}",
            (
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ),
        )

    @property
    def is_service_account(self) -> bool:
        return self.name.startswith("system:serviceaccount:")


ANONYMOUS = User("system:anonymous", ("system:unauthenticated",))
ADMIN = User("kubernetes-admin", (MASTERS, "system:authenticated"))


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


_PUBLIC_INFO = ("/healthz", "/livez", "/readyz", "/version", "/version/")
BOOTSTRAP_ROLES: dict[str, tuple[Rule, ...]] = {
    "system:public-info-viewer": (Rule((), (), ("get",), urls=_PUBLIC_INFO),),
    "system:discovery": (
        Rule(
            (),
            (),
            ("get",),
            urls=("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", *_PUBLIC_INFO),
        ),
    ),
    "system:basic-user": (
        Rule(("authentication.k8s.io",), ("selfsubjectreviews",), ("create",)),
        Rule(
            ("authorization.k8s.io",),
            ("selfsubjectaccessreviews", "selfsubjectrulesreviews"),
            ("create",),
        ),
    ),
}
_AUTHENTICATED = (("Group", "system:authenticated", ""),)
BOOTSTRAP_BINDINGS = (
    Binding(
        "ClusterRoleBinding",
        "system:public-info-viewer",
        "",
        "ClusterRole",
        "system:public-info-viewer",
        (*_AUTHENTICATED, ("Group", "system:unauthenticated", "")),
    ),
    Binding(
        "ClusterRoleBinding",
        "system:discovery",
        "",
        "ClusterRole",
        "system:discovery",
        _AUTHENTICATED,
    ),
    Binding(
        "ClusterRoleBinding",
        "system:basic-user",
        "",
        "ClusterRole",
        "system:basic-user",
        _AUTHENTICATED,
    ),
)
# What a rules review shows for system:masters (cluster-admin's rules).
_EVERYTHING = (Rule(("*",), ("*",), ("*",)), Rule((), (), ("*",), urls=("*",)))


def _rules(role: dict[str, Any]) -> tuple[Rule, ...]:
    return tuple(
        Rule(
            tuple(r.get("apiGroups") or ()),
            tuple(r.get("resources") or ()),
            tuple(r.get("verbs") or ()),
            tuple(r.get("resourceNames") or ()),
            () if r.get("resources") else tuple(r.get("nonResourceURLs") or ()),
        )
        for r in role.get("rules") or ()
        if r.get("resources") or r.get("nonResourceURLs")
    )


@dataclass
class Rbac:
    """The loaded roles and bindings (after the bootstrap ones), and the ServiceAccount tokens
    issued for their subjects."""

    cluster_roles: dict[str, tuple[Rule, ...]] = field(
        default_factory=lambda: dict(BOOTSTRAP_ROLES)
    )
    roles: dict[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict)
    bindings: list[Binding] = field(default_factory=lambda: list(BOOTSTRAP_BINDINGS))
    tokens: dict[str, User] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objects: Iterable[dict[str, Any]], default_namespace: str) -> Rbac:
        rbac = cls()
        for obj in objects:
            if obj.get("apiVersion") != _RBAC:
                continue
            meta = obj.get("metadata") or {}
            name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "")
            kind = obj.get("kind")
            if kind == "ClusterRole":
                rbac.cluster_roles[name] = _rules(obj)
            elif kind == "Role":
                rbac.roles[(namespace or default_namespace, name)] = _rules(obj)
            elif kind in ("ClusterRoleBinding", "RoleBinding"):
                ref = obj.get("roleRef") or {}
                ns = "" if kind == "ClusterRoleBinding" else namespace or default_namespace
                subjects = tuple(
                    (str(s.get("kind")), str(s.get("name")), str(s.get("namespace") or ns))
                    for s in obj.get("subjects") or ()
                )
                rbac.bindings.append(
                    Binding(
                        str(kind), name, ns, str(ref.get("kind")), str(ref.get("name")), subjects
                    )
                )
        for binding in rbac.bindings:
            for kind, name, namespace in binding.subjects:
                if kind == "ServiceAccount" and f"{namespace}/{name}" not in rbac.accounts():
                    rbac.tokens[secrets.token_urlsafe(32)] = User.service_account(namespace, name)
        return rbac

    def accounts(self) -> dict[str, str]:
        """`namespace/name` of each ServiceAccount given a token → its token."""
        return {
            user.name.removeprefix("system:serviceaccount:").replace(":", "/", 1): token
            for token, user in self.tokens.items()
        }

    def _subject_is(self, user: User, subject: tuple[str, str, str]) -> bool:
        kind, name, namespace = subject
        if kind == "ServiceAccount":
            return user.name == f"system:serviceaccount:{namespace}:{name}"
        if kind == "User":
            return user.name == name
        return kind == "Group" and name in user.groups

    def _grants(
        self, user: User, namespace: str
    ) -> Iterable[tuple[Binding, tuple[str, str, str], tuple[Rule, ...]]]:
        """Each binding that reaches `user` in `namespace` ("" only the cluster-wide ones), the
        subject that named the user, and the rules of its role."""
        for binding in self.bindings:
            if binding.namespace and binding.namespace != namespace:
                continue
            subject = next((s for s in binding.subjects if self._subject_is(user, s)), None)
            if subject is None:
                continue
            if binding.role_kind == "ClusterRole":
                rules = self.cluster_roles.get(binding.role, ())
            else:
                rules = self.roles.get((binding.namespace, binding.role), ())
            yield binding, subject, rules

    def authorize(
        self, user: User, group: str, resource: str, verb: str, namespace: str, name: str
    ) -> Decision:
        if MASTERS in user.groups:
            return Decision(True)
        for binding, subject, rules in self._grants(user, namespace):
            if any(rule.allows(group, resource, verb, name) for rule in rules):
                return Decision(True, _allowed_by(binding, subject))
        return Decision(False)

    def authorize_path(self, user: User, path: str, verb: str) -> Decision:
        """A non-resource request (discovery, `/version`, health): ClusterRoleBindings only."""
        if MASTERS in user.groups:
            return Decision(True)
        for binding, subject, rules in self._grants(user, ""):
            if any(rule.allows_path(path, verb) for rule in rules):
                return Decision(True, _allowed_by(binding, subject))
        return Decision(False)

    def rules_of(self, user: User, namespace: str) -> tuple[Rule, ...]:
        """Everything `user` may do in `namespace`, rule by rule: a SelfSubjectRulesReview."""
        granted = [rule for _, _, rules in self._grants(user, namespace) for rule in rules]
        return (*(_EVERYTHING if MASTERS in user.groups else ()), *granted)


def _allowed_by(binding: Binding, subject: tuple[str, str, str]) -> str:
    who = {
        "ServiceAccount": f'ServiceAccount "{subject[2]}/{subject[1]}"',
        "User": f'User "{subject[1]}"',
    }.get(subject[0], f'Group "{subject[1]}"')
    where = f' in namespace "{binding.namespace}"' if binding.namespace else ""
    return (
        f'RBAC: allowed by {binding.kind} "{binding.name}{where}" of '
        f'{binding.role_kind} "{binding.role}" to {who}'
    )


def load_manifests(path: Path, extra_components: Iterable[Path] = ()) -> list[dict[str, Any]]:
    """The objects of a Kustomize directory (rendered by the stock kubectl, components added),
    or of every YAML file in a plain directory, or of one file."""
    if path.is_dir() and (path / "kustomization.yaml").exists():
        components = list(extra_components)
        if components:
            return _kustomize_with(path, components)
        return _kustomize(path)
    files = sorted(path.glob("*.y*ml")) if path.is_dir() else [path]
    return [
        doc for f in files for doc in yaml.safe_load_all(f.read_text()) if isinstance(doc, dict)
    ]


def _kustomize(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise ValueError(f"kubectl kustomize {path}: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if isinstance(doc, dict)]


def _kustomize_with(base: Path, components: list[Path]) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        overlay = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            # Kustomize takes no absolute roots.
            "resources": [os.path.relpath(base.resolve(), tmp)],
            "components": [os.path.relpath(c.resolve(), tmp) for c in components],
        }
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
        return _kustomize(Path(tmp))
