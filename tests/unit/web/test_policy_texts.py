"""The detail page's cache of policy YAML: hits are remembered, misses are not."""

from __future__ import annotations

from remediator.web.console import PolicyTexts
from tests.fixtures.web import Console

YAML = "policies:\n  - name: late\n    description: recorded after the first look\n"


def test_a_set_recorded_after_a_miss_is_found(console: Console) -> None:
    texts = PolicyTexts()
    assert texts.get(console.deps, "h-late", "late") is None
    console.repository.record_policy_set(
        content_hash="h-late", commit="abc123", dirty=False, files={"late.yaml": YAML}
    )
    found = texts.get(console.deps, "h-late", "late")
    assert found is not None and found.file == "late.yaml" and found.commit == "abc123"
    assert "recorded after the first look" in found.yaml


def test_hits_are_kept_within_the_bound(console: Console) -> None:
    texts = PolicyTexts(size=1)
    for name in ("a", "b"):
        console.repository.record_policy_set(
            content_hash=f"h-{name}",
            commit=None,
            dirty=False,
            files={f"{name}.yaml": f"policies:\n  - name: {name}\n"},
        )
        assert texts.get(console.deps, f"h-{name}", name) is not None
    assert len(texts._cut) == 1
