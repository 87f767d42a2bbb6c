"""Authentication and RBAC at the simulated API server's door, in front of the API (behind the
fault middleware, which logs what this answers), and the self reviews kubectl asks through
`kubectl auth can-i`: SelfSubjectAccessReview and SelfSubjectRulesReview.

With RBAC loaded, every request is somebody's, as on a real apiserver: a ServiceAccount token this
simulator issued is that account, held to its roles; the admin kubeconfig's token is a member of
system:masters; no token is system:anonymous (the public /version and health paths only); any
other token is 401. Without RBAC every request is the admin's, as before.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from remediator.sim.kube.api import protobuf
from remediator.sim.kube.api.faults import USER_KEY, RequestInfo, request_info
from remediator.sim.kube.api.rbac import ADMIN, ANONYMOUS, Decision, Rbac, User

_AUTHORIZATION = "/apis/authorization.k8s.io/v1"
SSAR_PATH = f"{_AUTHORIZATION}/selfsubjectaccessreviews"
SSRR_PATH = f"{_AUTHORIZATION}/selfsubjectrulesreviews"


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def _group(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    return parts[1] if len(parts) >= 3 and parts[0] == "apis" else ""


def status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The apiserver's `Status` failure body."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        **({"details": details} if details is not None else {}),
        "code": code,
    }


def forbidden(user: User, info: RequestInfo, group: str, path: str) -> dict[str, Any]:
    """The apiserver's 403 Status for an RBAC refusal."""
    if info.resource is None:
        message = f'forbidden: User "{user.name}" cannot {info.verb} path "{path}"'
        return status(403, "Forbidden", message, {})
    base = info.resource.partition("/")[0]
    qualified = f"{base}.{group}" if group else base
    where = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    reason = (
        f'User "{user.name}" cannot {info.verb} resource "{info.resource}" in API group '
        f'"{group}" {where}'
    )
    subject = f'{qualified} "{info.name}"' if info.name else qualified
    details = {
        **({"name": info.name} if info.name else {}),
        **({"group": group} if group else {}),
        "kind": base,
    }
    return status(403, "Forbidden", f"{subject} is forbidden: {reason}", details)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _send_json(send: Send, code: int, body: dict[str, Any]) -> None:
    raw = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": raw})


class RbacMiddleware:
    """Who sends each request, whether RBAC lets them, and the answers to self reviews."""

    def __init__(
        self,
        app: ASGIApp,
        rbac: Rbac | None,
        on_refused: Callable[[RequestInfo, str, str, str], None] | None = None,
        admin_token: str | None = None,
    ) -> None:
        self.app = app
        self.enforcing = rbac is not None
        # Without RBAC every request is the admin's; the bootstrap roles still answer reviews.
        self.rbac = rbac or Rbac()
        self._on_refused = on_refused
        self._admin_token = admin_token

    def _user(self, scope: Scope) -> User | None:
        """The request's user; None for a token this simulator never issued (401)."""
        if not self.enforcing:
            return ADMIN
        auth = _header(scope, b"authorization")
        if not auth:
            return ANONYMOUS
        scheme, _, token = auth.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        if self._admin_token and secrets.compare_digest(token, self._admin_token):
            return ADMIN
        return self.rbac.tokens.get(token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"].rstrip("/") or "/"
        review = scope["method"] == "POST" and path in (SSAR_PATH, SSRR_PATH)
        user = self._user(scope)
        if user is ADMIN and not review:
            await self.app(scope, receive, send)
            return
        if user is None:
            await _send_json(send, 401, status(401, "Unauthorized", "Unauthorized"))
            return
        if user is not ADMIN:
            scope[USER_KEY] = user.name
        info = request_info(
            scope["method"], scope["path"], bytes(scope.get("query_string", b"")).decode()
        )
        group = _group(scope["path"])
        if info.resource is None:
            decision = self.rbac.authorize_path(user, scope["path"], info.verb)
        else:
            decision = self.rbac.authorize(
                user, group, info.resource, info.verb, info.namespace, info.name
            )
        if not decision.allowed:
            body = forbidden(user, info, group, scope["path"])
            if self._on_refused is not None and user.is_service_account:
                self._on_refused(info, group, user.name, body["message"])
            await _send_json(send, 403, body)
            return
        if path == SSAR_PATH and review:
            await self._access_review(user, scope, receive, send)
        elif review:
            await self._rules_review(user, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _spec(
        self, scope: Scope, receive: Receive, send: Send, kind: str
    ) -> dict[str, Any] | None:
        """The review's spec, from JSON or (kubectl's typed client) protobuf."""
        raw = await _read_body(receive)
        media = _header(scope, b"content-type").split(";")[0].strip()
        spec: Any = None
        try:
            if media == protobuf.MEDIA_TYPE:
                spec = protobuf.review_spec(raw, kind)
            else:
                body = json.loads(raw or b"{}")
                spec = body.get("spec") if isinstance(body, dict) else None
        except (ValueError, UnicodeDecodeError):
            spec = None
        if isinstance(spec, dict):
            return spec
        message = f"the request body is not a {kind}"
        await _send_json(send, 400, status(400, "BadRequest", message))
        return None

    async def _access_review(self, user: User, scope: Scope, receive: Receive, send: Send) -> None:
        spec = await self._spec(scope, receive, send, "SelfSubjectAccessReview")
        if spec is None:
            return
        attrs, path_attrs = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        decision: Decision
        if isinstance(attrs, dict):
            resource = str(attrs.get("resource") or "")
            if attrs.get("subresource"):
                resource += f"/{attrs['subresource']}"
            decision = self.rbac.authorize(
                user,
                str(attrs.get("group") or ""),
                resource,
                str(attrs.get("verb") or ""),
                str(attrs.get("namespace") or ""),
                str(attrs.get("name") or ""),
            )
        elif isinstance(path_attrs, dict):
            decision = self.rbac.authorize_path(
                user, str(path_attrs.get("path") or ""), str(path_attrs.get("verb") or "")
            )
        else:
            message = (
                "spec.resourceAttributes: Required value: exactly one of nonResourceAttributes "
                "or resourceAttributes must be specified"
            )
            await _send_json(send, 422, status(422, "Invalid", message))
            return
        answer: dict[str, Any] = {"allowed": decision.allowed}
        if decision.reason:
            answer["reason"] = decision.reason
        await _send_json(send, 201, _review("SelfSubjectAccessReview", spec, answer))

    async def _rules_review(self, user: User, scope: Scope, receive: Receive, send: Send) -> None:
        spec = await self._spec(scope, receive, send, "SelfSubjectRulesReview")
        if spec is None:
            return
        namespace = str(spec.get("namespace") or "")
        if not namespace:
            await _send_json(send, 400, status(400, "BadRequest", "no namespace on request"))
            return
        rules = self.rbac.rules_of(user, namespace)
        answer = {
            "resourceRules": [r.to_review() for r in rules if not r.urls],
            "nonResourceRules": [r.to_review() for r in rules if r.urls],
            "incomplete": False,
        }
        await _send_json(send, 201, _review("SelfSubjectRulesReview", spec, answer))


def _review(kind: str, spec: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": answer,
    }
