"""Who is asking: bearer tokens from the config, each read-only, operator or push-only.

Browsers log in once by pasting a token and get an opaque server-side session (see
store/sessions): the cookie is a random id, never the token. API clients send
`Authorization: Bearer …`. Tokens are compared in constant time and never shown:
the timeline names a person by the name they gave plus the token's short fingerprint, so two
people sharing one token can still be told apart and a leaked log never leaks a token.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from pydantic import SecretStr

from remediator.settings import ScopedToken, WebSettings

SESSION_COOKIE = "remediator_session"
ACTOR_HEADER = "X-Remediator-Actor"
_NAME_CHARS = re.compile(r"[^A-Za-z0-9@._+ -]")


class Role(IntEnum):
    # Below read-only: machine senders (node agents, Alertmanager) may post signals and
    # heartbeats and nothing else, not even read the console.
    PUSH = 0
    READONLY = 1
    OPERATOR = 2


@dataclass(frozen=True)
class Principal:
    role: Role
    fingerprint: str
    name: str | None = None
    via_cookie: bool = False
    # The clusters a scoped token may see; None: every cluster.
    clusters: frozenset[str] | None = None

    def may_see(self, cluster: str) -> bool:
        return self.clusters is None or cluster in self.clusters

    @property
    def actor(self) -> str:
        """How the timeline names this person."""
        token = f"{self.role.name.lower()} token {self.fingerprint}"
        return f"{self.name} ({token})" if self.name else token

    @property
    def can_act(self) -> bool:
        return self.role >= Role.OPERATOR

    @property
    def can_read(self) -> bool:
        return self.role >= Role.READONLY

    @property
    def can_push(self) -> bool:
        return self.role in (Role.PUSH, Role.OPERATOR)


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:8]


def clean_name(raw: str | None) -> str | None:
    """A self-declared name, for the record only: printable, short, never trusted for access."""
    if not raw:
        return None
    name = _NAME_CHARS.sub("", raw).strip()[:64]
    return name or None


def scope_of(configured: Sequence[SecretStr | ScopedToken], token_id: str) -> frozenset[str] | None:
    """The clusters of the configured token with this fingerprint (None: unscoped)."""
    for entry in configured:
        if isinstance(entry, ScopedToken) and fingerprint(entry.get_secret_value()) == token_id:
            return frozenset(entry.clusters)
    return None


def _matches(token: str, configured: Sequence[SecretStr | ScopedToken]) -> bool:
    given = token.encode()
    found = False
    for secret in configured:
        # No early exit: the time taken does not tell which (or whether a) token matched.
        found |= hmac.compare_digest(given, secret.get_secret_value().encode())
    return found


def authenticate(
    settings: WebSettings, token: str | None, *, name: str | None = None, via_cookie: bool = False
) -> Principal | None:
    """The principal for `token`, or None when it is missing or unknown; operator wins when a
    token is listed under several roles (then read-only, then push-only)."""
    if not token:
        return None
    clusters = None
    if _matches(token, settings.operator_tokens):
        role = Role.OPERATOR
        clusters = scope_of(settings.operator_tokens, fingerprint(token))
    elif _matches(token, settings.readonly_tokens):
        role = Role.READONLY
        clusters = scope_of(settings.readonly_tokens, fingerprint(token))
    elif _matches(token, settings.push_tokens):
        role = Role.PUSH
    else:
        return None
    return Principal(role, fingerprint(token), clean_name(name), via_cookie, clusters)


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
