"""CSRF protection for the cookie-authenticated forms, without server-side sessions.

A browser sends the login cookie with any request, including one a hostile page makes it send, so
every state-changing request that was authenticated by the cookie must also carry a token that
only our own pages know: HMAC(login token, purpose). It needs no storage, holds across replicas
and restarts, and cannot be computed without the login token itself. Requests that carry an
`Authorization` header are not at risk (a browser never adds that header on its own).
"""

from __future__ import annotations

import hashlib
import hmac

FORM_FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
_PURPOSE = b"remediator console csrf v1"


def token_for(login_token: str) -> str:
    return hmac.new(login_token.encode(), _PURPOSE, hashlib.sha256).hexdigest()


def valid(login_token: str, presented: str | None) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(token_for(login_token).encode(), presented.encode())
