"""CSRF protection for the cookie-authenticated forms.

A browser sends the login cookie with any request, including one a hostile page makes it send, so
every state-changing request that was authenticated by the cookie must also carry a token that
only our own pages know: HMAC(session id, purpose). It needs no storage of its own, holds across
replicas and restarts, and cannot be computed without the session id, which lives only in the
HttpOnly cookie. Requests that carry an
`Authorization` header are not at risk (a browser never adds that header on its own).
"""

from __future__ import annotations

import hashlib
import hmac

FORM_FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
_PURPOSE = b"remediator console csrf v1"


def token_for(secret: str) -> str:
    return hmac.new(secret.encode(), _PURPOSE, hashlib.sha256).hexdigest()


def valid(secret: str, presented: str | None) -> bool:
    if not presented:
        return False
    return hmac.compare_digest(token_for(secret).encode(), presented.encode())
