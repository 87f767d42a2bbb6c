"""Tokens limited to clusters: parsed from the config, carried by the principal."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediator.errors import RemediatorError
from remediator.settings import load_settings
from remediator.web.auth import Role, authenticate


def _settings(tmp_path: Path, web: str) -> Path:
    path = tmp_path / "remediator.yaml"
    path.write_text(f"cluster_name: alpha\nweb:\n{web}")
    return path


def test_a_scoped_entry_limits_the_token_and_a_plain_one_does_not(tmp_path: Path) -> None:
    config = _settings(
        tmp_path,
        "  operator_tokens:\n"
        "    - plain-operator-token\n"
        "    - {token: alpha-operator-token, clusters: [alpha, alpha-2]}\n"
        "  readonly_tokens:\n"
        "    - {token: bravo-reader-token, clusters: [bravo]}\n",
    )
    web = load_settings(config).web
    plain = authenticate(web, "plain-operator-token")
    scoped = authenticate(web, "alpha-operator-token")
    reader = authenticate(web, "bravo-reader-token")
    assert plain is not None and plain.clusters is None and plain.may_see("anything")
    assert scoped is not None and scoped.role is Role.OPERATOR
    assert scoped.clusters == frozenset({"alpha", "alpha-2"})
    assert scoped.may_see("alpha") and not scoped.may_see("bravo")
    assert reader is not None and reader.role is Role.READONLY and not reader.may_see("alpha")
    assert authenticate(web, "alpha") is None


@pytest.mark.parametrize(
    "entry",
    [
        "{token: t-0123456789, clusters: []}",
        "{token: t-0123456789}",
        "{token: t-0123456789, clusters: [alpha], role: admin}",
    ],
)
def test_a_scoped_entry_must_name_its_clusters(tmp_path: Path, entry: str) -> None:
    config = _settings(tmp_path, f"  operator_tokens:\n    - {entry}\n")
    with pytest.raises(RemediatorError, match=r"web\.operator_tokens"):
        load_settings(config)
