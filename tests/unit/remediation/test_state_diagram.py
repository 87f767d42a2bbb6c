"""docs/state-machine.md draws the transition table; this keeps the drawing honest."""

from __future__ import annotations

import re
from pathlib import Path

from remediator.model.states import CANCELLABLE, TRANSITIONS, State

DOC = Path(__file__).resolve().parents[3] / "docs" / "state-machine.md"


def render() -> str:
    lines = ["stateDiagram-v2", "    [*] --> queued", "    [*] --> detected"]
    for source in State:
        lines += [f"    {source} --> {target}" for target in sorted(TRANSITIONS[source])]
    lines += [f"    {source} --> cancelled: cancel" for source in sorted(CANCELLABLE)]
    lines += ["    succeeded --> [*]", "    cancelled --> [*]"]
    return "\n".join(lines)


def test_the_documented_diagram_is_the_transition_table() -> None:
    blocks = re.findall(r"```mermaid\n(.*?)\n```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/state-machine.md has no mermaid diagram"
    assert blocks[0] == render(), "regenerate the diagram: see the test's render()"
