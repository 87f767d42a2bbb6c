"""Tokens, roles, names on the timeline, and the stateless CSRF token."""

from __future__ import annotations

from pydantic import SecretStr

from remediator.settings import WebSettings
from remediator.web import csrf
from remediator.web.auth import Role, authenticate, bearer_token, clean_name, fingerprint

SETTINGS = WebSettings(
    operator_tokens=[SecretStr("op-1"), SecretStr("both")],
    readonly_tokens=[SecretStr("ro-1"), SecretStr("both")],
)


def test_roles() -> None:
    operator = authenticate(SETTINGS, "op-1")
    assert operator is not None and operator.role is Role.OPERATOR and operator.can_act
    reader = authenticate(SETTINGS, "ro-1")
    assert reader is not None and reader.role is Role.READONLY and not reader.can_act
    both = authenticate(SETTINGS, "both")
    assert both is not None and both.role is Role.OPERATOR
    assert authenticate(SETTINGS, "op-") is None
    assert authenticate(SETTINGS, "") is None
    assert authenticate(SETTINGS, None) is None
    assert authenticate(WebSettings(), "anything") is None


def test_actor_names_the_person_and_the_token_never_the_secret() -> None:
    alice = authenticate(SETTINGS, "op-1", name="Alice <script>")
    assert alice is not None
    assert alice.actor == f"Alice script (operator token {fingerprint('op-1')})"
    assert "op-1" not in alice.actor
    anonymous = authenticate(SETTINGS, "ro-1")
    assert anonymous is not None and anonymous.actor == f"readonly token {fingerprint('ro-1')}"


def test_clean_name() -> None:
    assert clean_name(None) is None
    assert clean_name("  \x00\n ") is None
    assert clean_name("bob@example.com") == "bob@example.com"
    assert clean_name("x" * 100) == "x" * 64


def test_bearer_token() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer   abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_csrf_token_is_bound_to_the_login_token() -> None:
    token = csrf.token_for("op-1")
    assert csrf.valid("op-1", token)
    assert not csrf.valid("op-2", token)
    assert not csrf.valid("op-1", None)
    assert not csrf.valid("op-1", token[:-1])
    assert "op-1" not in token
