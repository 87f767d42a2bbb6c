"""Runbooks served by the console at /runbooks/{slug}, rendered from runbooks/*.md.

On-call reads them beside the remediation that links them, so they must work without network.
Raw HTML in the markdown is not passed through (the renderer escapes it), and links between
runbooks (`xid-79.md`) are rewritten to their console URLs.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markupsafe import Markup

RUNBOOKS_ENV = "REMEDIATOR_RUNBOOKS_DIR"
SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,80}")
_SIBLING = re.compile(r"(?P<slug>README|[a-z0-9][a-z0-9-]*)\.md(?P<anchor>#[\w-]*)?")


def find_dir() -> Path | None:
    """`$REMEDIATOR_RUNBOOKS_DIR`, else runbooks/ beside the package (a checkout), else
    `<sys.prefix>/share/remediator/runbooks` (a container image)."""
    candidates: list[Path] = []
    if env := os.environ.get(RUNBOOKS_ENV):
        candidates.append(Path(env))
    candidates.extend(parent / "runbooks" for parent in Path(__file__).resolve().parents[1:4])
    candidates.append(Path(sys.prefix) / "share" / "remediator" / "runbooks")
    return next((c for c in candidates if (c / "README.md").is_file()), None)


def _rewrite_links(state: StateCore) -> None:
    for block in state.tokens:
        for token in block.children or ():
            if token.type != "link_open":
                continue
            href = str(token.attrGet("href") or "")
            match = _SIBLING.fullmatch(href)
            if match:
                slug = "" if match["slug"] == "README" else match["slug"]
                token.attrSet("href", f"/runbooks/{slug}{match['anchor'] or ''}")


def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.core.ruler.push("runbook_links", _rewrite_links)
    return md


@dataclass(frozen=True)
class Runbook:
    slug: str
    title: str
    html: Markup


class Runbooks:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._md = _renderer()

    def slugs(self) -> list[str]:
        if self.directory is None:
            return []
        return sorted(p.stem for p in self.directory.glob("*.md") if p.stem != "README")

    def get(self, slug: str) -> Runbook | None:
        """`slug` "" is the index (README.md); anything not a plain runbook name is None."""
        if self.directory is None:
            return None
        if slug == "":
            path = self.directory / "README.md"
        elif SLUG.fullmatch(slug) and slug in self.slugs():
            path = self.directory / f"{slug}.md"
        else:
            return None
        text = path.read_text(encoding="utf-8")
        title = next(
            (ln.lstrip("# ").strip() for ln in text.splitlines() if ln.startswith("#")), slug
        )
        return Runbook(slug, title, Markup(self._md.render(text)))
