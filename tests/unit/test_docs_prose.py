"""The docs read once: no run of words said again a few lines later (a paragraph pasted twice,
an edit that left the old sentence behind). Code blocks and tables are left out: commands and
rows repeat by design."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = 7  # words: shorter runs recur in ordinary prose ("the agent reads the new boot's log")
NEAR = 60  # words: a repeat this close is a leftover, not a reminder


def prose_words(text: str) -> list[str]:
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    lines = [
        line
        for line in text.splitlines()
        if not line.lstrip().startswith("|") and not line.startswith("    ")
    ]
    return " ".join(lines).split()


def near_repeats(words: list[str]) -> list[str]:
    last: dict[tuple[str, ...], int] = {}
    found = []
    for i in range(len(words) - RUN + 1):
        run = tuple(words[i : i + RUN])
        if run in last and RUN <= i - last[run] <= NEAR:
            found.append(" ".join(run))
        last[run] = i
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_no_doc_says_the_same_words_twice_in_a_row(doc: Path) -> None:
    assert near_repeats(prose_words(doc.read_text())) == []
