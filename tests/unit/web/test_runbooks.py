"""Runbooks rendered safely, linked to each other, and only by plain name."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediator.web import views
from remediator.web.runbooks import Runbooks, find_dir

SHIPPED = Path(__file__).resolve().parents[3] / "runbooks"


@pytest.fixture
def books(tmp_path: Path) -> Runbooks:
    (tmp_path / "README.md").write_text("# Index\n\n[XID 79](xid-79.md) [raw](other.md#what)\n")
    (tmp_path / "xid-79.md").write_text(
        "# XID 79\n\n<script>alert(1)</script>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "[bad](javascript:alert(1)) [home](README.md)\n"
    )
    return Runbooks(tmp_path)


def test_renders_markdown_without_raw_html(books: Runbooks) -> None:
    book = books.get("xid-79")
    assert book is not None and book.title == "XID 79"
    assert "<script>" not in book.html
    assert "&lt;script&gt;" in book.html
    assert "<table>" in book.html
    assert 'href="javascript' not in book.html
    assert 'href="/runbooks/"' in book.html


def test_links_between_runbooks_point_at_the_console(books: Runbooks) -> None:
    index = books.get("")
    assert index is not None
    assert 'href="/runbooks/xid-79"' in index.html
    assert 'href="/runbooks/other#what"' in index.html


@pytest.mark.parametrize("slug", ["../secrets", "README", "missing", "XID-79", "x" * 200])
def test_only_plain_existing_names(books: Runbooks, slug: str) -> None:
    assert books.get(slug) is None


def test_without_a_directory_there_are_none() -> None:
    assert Runbooks(None).get("") is None
    assert Runbooks(None).slugs() == []


def test_the_checkout_is_found_and_every_linked_runbook_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REMEDIATOR_RUNBOOKS_DIR", raising=False)
    assert find_dir() == SHIPPED
    slugs = set(Runbooks(SHIPPED).slugs())
    linked = {*views._XID_RUNBOOKS.values(), *views._KIND_RUNBOOKS.values()}
    linked |= {"held-by-opt-out", "drain-stuck-pdb", "remediation-stuck", "replacement-failed"}
    assert linked <= slugs


def test_environment_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "README.md").write_text("# x\n")
    monkeypatch.setenv("REMEDIATOR_RUNBOOKS_DIR", str(tmp_path))
    assert find_dir() == tmp_path
