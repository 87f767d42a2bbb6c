"""Console logins as server-side sessions: who a session cookie names, and the cookie itself.

A session outlives nothing it was built on: when its token is removed from the configuration,
or moved to another role, the session no longer authenticates.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import Request, Response

from remediator.settings import WebSettings
from remediator.store.sessions import SessionStore
from remediator.web.auth import SESSION_COOKIE, Principal, Role, fingerprint, scope_of


def configured_role(settings: WebSettings, token_id: str) -> Role | None:
    """The role of the configured token with this fingerprint now (operator wins)."""
    for role, tokens in (
        (Role.OPERATOR, settings.operator_tokens),
        (Role.READONLY, settings.readonly_tokens),
    ):
        if any(fingerprint(t.get_secret_value()) == token_id for t in tokens):
            return role
    return None


def store(request: Request) -> SessionStore:
    sessions: SessionStore = request.app.state.sessions
    return sessions


def principal(request: Request, settings: WebSettings) -> Principal | None:
    session_id = request.cookies.get(SESSION_COOKIE)
    if not session_id:
        return None
    found = store(request).find(session_id)
    if found is None:
        return None
    role = configured_role(settings, found.token_id)
    if role is None or role.name.lower() != found.role:
        return None
    tokens = settings.operator_tokens if role is Role.OPERATOR else settings.readonly_tokens
    clusters = scope_of(tokens, found.token_id)
    return Principal(role, found.token_id, found.name, via_cookie=True, clusters=clusters)


def open_session(
    request: Request, response: Response, who: Principal, settings: WebSettings
) -> None:
    lifetime = timedelta(hours=settings.session_hours)
    session_id = store(request).open(
        token_id=who.fingerprint, role=who.role.name.lower(), name=who.name, lifetime=lifetime
    )
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=int(lifetime.total_seconds()),
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request, settings),
        path="/",
    )


def close_session(request: Request, response: Response, settings: WebSettings) -> None:
    session_id = request.cookies.get(SESSION_COOKIE)
    if session_id:
        store(request).revoke(session_id)
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=secure_cookies(request, settings),
    )


def secure_cookies(request: Request, settings: WebSettings) -> bool:
    """Secure whenever people reach us over https: said by the configured external URL (TLS
    may end at a proxy), or seen on the request itself."""
    external = (settings.external_url or "").lower()
    return external.startswith("https://") or request.url.scheme == "https"
