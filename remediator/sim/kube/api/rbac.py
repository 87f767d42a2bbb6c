"""RBAC for the simulated API server: ClusterRoles, Roles and their bindings, loaded from
manifests (the project's own deploy/ by default), enforced for requests that carry a
ServiceAccount token this simulator issued, and asked through `SelfSubjectAccessReview`.

The rules are the real authorizer's: a ClusterRoleBinding grants its ClusterRole everywhere, a
RoleBinding grants its Role (or a ClusterRole) in its own namespace; a rule matches on API group,
resource (`pods/eviction` for a subresource), verb and, when it names any, the object's name
(never a create or a list, which name no object). Every authenticated user may read discovery
and `/version` and create a SelfSubjectAccessReview (the bootstrap roles system:discovery and
system:basic-user). A refusal is the apiserver's 403 `Status`. A request with no token, or one
this simulator did not issue for a ServiceAccount (the admin kubeconfig's), is served as before:
unrestricted.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from starlette.types import ASGIApp, Receive, Scope, Send

from remediator.sim.kube.api.faults import USER_KEY, RequestInfo, request_info

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
_RBAC = "rbac.authorization.k8s.io/v1"
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"


@dataclass(frozen=True)
class Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str] = frozenset()

    def allows(self, group: str, resource: str, verb: str, name: str) -> bool:
        if not (self.groups & {group, "*"} and self.verbs & {verb, "*"}):
            return False
        sub = resource.partition("/")[2]
        if not self.resources & {resource, "*", *((f"*/{sub}",) if sub else ())}:
            return False
        return not self.names or name in self.names


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


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


def _rules(role: dict[str, Any]) -> tuple[Rule, ...]:
    return tuple(
        Rule(
            frozenset(r.get("apiGroups") or ()),
            frozenset(r.get("resources") or ()),
            frozenset(r.get("verbs") or ()),
            frozenset(r.get("resourceNames") or ()),
        )
        for r in role.get("rules") or ()
        if r.get("resources")
    )


@dataclass
class Rbac:
    """The loaded roles and bindings, and the ServiceAccount tokens issued for their subjects."""

    cluster_roles: dict[str, tuple[Rule, ...]] = field(default_factory=dict)
    roles: dict[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict)
    bindings: list[Binding] = field(default_factory=list)
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

    def authorize(
        self, user: User, group: str, resource: str, verb: str, namespace: str, name: str
    ) -> Decision:
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
            if any(rule.allows(group, resource, verb, name) for rule in rules):
                who = {
                    "ServiceAccount": f'ServiceAccount "{subject[2]}/{subject[1]}"',
                    "User": f'User "{subject[1]}"',
                }.get(subject[0], f'Group "{subject[1]}"')
                where = f' in namespace "{binding.namespace}"' if binding.namespace else ""
                return Decision(
                    True,
                    f'RBAC: allowed by {binding.kind} "{binding.name}{where}" of '
                    f'{binding.role_kind} "{binding.role}" to {who}',
                )
        return Decision(False)


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


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def _group(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    return parts[1] if len(parts) >= 3 and parts[0] == "apis" else ""


def forbidden(user: User, info: RequestInfo, group: str, path: str) -> dict[str, Any]:
    """The apiserver's 403 Status for an RBAC refusal."""
    if info.resource is None:
        message = f'forbidden: User "{user.name}" cannot {info.verb} path "{path}"'
        details: dict[str, Any] = {}
    else:
        base = info.resource.partition("/")[0]
        qualified = f"{base}.{group}" if group else base
        where = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
        reason = (
            f'User "{user.name}" cannot {info.verb} resource "{info.resource}" in API group '
            f'"{group}" {where}'
        )
        subject = f'{qualified} "{info.name}"' if info.name else qualified
        message = f"{subject} is forbidden: {reason}"
        details = {
            **({"name": info.name} if info.name else {}),
            **({"group": group} if group else {}),
            "kind": base,
        }
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": raw})


class RbacMiddleware:
    """In front of the API server (behind the fault middleware, which logs what this answers)."""

    def __init__(
        self,
        app: ASGIApp,
        rbac: Rbac | None,
        on_refused: Callable[[RequestInfo, str, str, str], None] | None = None,
    ) -> None:
        self.app = app
        self.rbac = rbac
        self._on_refused = on_refused

    def _user(self, scope: Scope) -> User | None:
        if self.rbac is None:
            return None
        auth = _header(scope, b"authorization")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.rbac.tokens.get(token.strip())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = self._user(scope)
        path = scope["path"].rstrip("/")
        if path == SSAR_PATH and scope["method"] == "POST":
            await self._review(user, receive, send)
            return
        if user is None or self.rbac is None:
            await self.app(scope, receive, send)
            return
        scope[USER_KEY] = user.name
        info = request_info(
            scope["method"], scope["path"], bytes(scope.get("query_string", b"")).decode()
        )
        if info.resource is None:  # discovery, /version, health: every authenticated user
            await self.app(scope, receive, send)
            return
        group = _group(scope["path"])
        decision = self.rbac.authorize(
            user, group, info.resource, info.verb, info.namespace, info.name
        )
        if decision.allowed:
            await self.app(scope, receive, send)
            return
        body = forbidden(user, info, group, scope["path"])
        if self._on_refused is not None:
            self._on_refused(info, group, user.name, body["message"])
        await _send_json(send, 403, body)

    async def _review(self, user: User | None, receive: Receive, send: Send) -> None:
        try:
            review = json.loads(await _read_body(receive) or b"{}")
        except ValueError:
            review = None
        spec = review.get("spec") if isinstance(review, dict) else None
        if not isinstance(spec, dict):
            await _send_json(
                send, 400, _bad_request("the request body is not a SelfSubjectAccessReview")
            )
            return
        attrs = spec.get("resourceAttributes")
        if not isinstance(attrs, dict):
            await _send_json(
                send, 422, _bad_request("spec.resourceAttributes: Required value", code=422)
            )
            return
        resource = str(attrs.get("resource") or "")
        if attrs.get("subresource"):
            resource += f"/{attrs['subresource']}"
        if user is None or self.rbac is None:
            decision = Decision(True, "")  # the unrestricted admin of this simulator
        else:
            decision = self.rbac.authorize(
                user,
                str(attrs.get("group") or ""),
                resource,
                str(attrs.get("verb") or ""),
                str(attrs.get("namespace") or ""),
                str(attrs.get("name") or ""),
            )
        status: dict[str, Any] = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        await _send_json(
            send,
            201,
            {
                "kind": "SelfSubjectAccessReview",
                "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "spec": spec,
                "status": status,
            },
        )


def _bad_request(message: str, code: int = 400) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest" if code == 400 else "Invalid",
        "code": code,
    }
