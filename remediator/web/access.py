"""FastAPI dependencies: who may read, who may act, who may push signals, and the app-wide
objects a route needs."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from remediator.store.audit import AuditLog
from remediator.web import csrf, sessions
from remediator.web.auth import (
    ACTOR_HEADER,
    SESSION_COOKIE,
    Principal,
    authenticate,
    bearer_token,
)
from remediator.web.console import PolicyTexts
from remediator.web.deps import WebDeps
from remediator.web.metrics import ConsoleMetrics
from remediator.web.problems import WebError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def web_deps(request: Request) -> WebDeps:
    """The app's deps; in the fleet console, those of the cluster this request is about."""
    deps: WebDeps = getattr(request.state, "deps", None) or request.app.state.deps
    return deps


def request_cluster(request: Request) -> str | None:
    """The cluster this request reads or acts on; None on the fleet console's own pages, which
    show only the clusters the caller may see."""
    if hasattr(request.state, "cluster"):
        cluster: str | None = request.state.cluster
        return cluster
    return web_deps(request).settings.cluster_name


def audit_log(request: Request) -> AuditLog:
    """The audit log of the request's cluster: commands are audited under the cluster they
    were for, from whichever console they came."""
    audit: AuditLog = getattr(request.state, "audit", None) or request.app.state.audit
    return audit


def console_metrics(request: Request) -> ConsoleMetrics:
    metrics: ConsoleMetrics = request.app.state.metrics
    return metrics


def policy_texts(request: Request) -> PolicyTexts:
    texts: PolicyTexts = request.app.state.policy_texts
    return texts


def csrf_secret(request: Request) -> str | None:
    """What this request's CSRF token is derived from: the bearer token, else the session id."""
    return bearer_token(request.headers.get("authorization")) or request.cookies.get(SESSION_COOKIE)


def principal_of(request: Request) -> Principal | None:
    settings = web_deps(request).settings.web
    header = bearer_token(request.headers.get("authorization"))
    if header is not None:
        return authenticate(settings, header, name=request.headers.get(ACTOR_HEADER))
    return sessions.principal(request, settings)


async def require_principal(request: Request) -> Principal:
    principal = principal_of(request)
    if principal is None:
        raise WebError(401, "authentication required: a bearer token (read-only or operator)")
    return principal


async def require_reader(
    request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> Principal:
    if not principal.can_read:
        raise WebError(403, "a push-only token may post signals and heartbeats, nothing else")
    cluster = request_cluster(request)
    if cluster is not None and not principal.may_see(cluster):
        raise WebError(403, f"your token is not for cluster {cluster}")
    return principal


async def require_operator(
    request: Request, principal: Annotated[Principal, Depends(require_reader)]
) -> Principal:
    if not principal.can_act:
        raise WebError(403, "this action needs an operator token; yours is read-only")
    if principal.via_cookie and request.method not in SAFE_METHODS:
        presented = request.headers.get(csrf.HEADER)
        if presented is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")
        ):
            value = (await request.form()).get(csrf.FORM_FIELD)
            presented = value if isinstance(value, str) else None
        session_id = request.cookies.get(SESSION_COOKIE) or ""
        if not csrf.valid(session_id, presented):
            raise WebError(403, "missing or wrong CSRF token: reload the page and try again")
    return principal


async def require_pusher(
    request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> Principal:
    """Push-only tokens by header (machines have no cookies to forge), or an operator."""
    if principal.can_push and not principal.can_act and not principal.via_cookie:
        return principal
    if not principal.can_read:
        raise WebError(403, "a push-only token must be sent as `Authorization: Bearer`")
    return await require_operator(request, await require_reader(request, principal))


async def _deps(request: Request) -> WebDeps:
    return web_deps(request)


async def _metrics(request: Request) -> ConsoleMetrics:
    return console_metrics(request)


async def _texts(request: Request) -> PolicyTexts:
    return policy_texts(request)


# The dependencies are async on purpose: FastAPI runs a plain `def` dependency in its thread
# pool, a thread hop per dependency per request (a heartbeat cost 3.5 ms of CPU, most of it
# waking worker threads, at 10,000 agents ~3.5 cores).
Reader = Annotated[Principal, Depends(require_reader)]
Pusher = Annotated[Principal, Depends(require_pusher)]
Deps = Annotated[WebDeps, Depends(_deps)]
Metrics = Annotated[ConsoleMetrics, Depends(_metrics)]
Texts = Annotated[PolicyTexts, Depends(_texts)]
