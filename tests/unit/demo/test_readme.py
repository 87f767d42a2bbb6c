"""The README's promises that code can check: every setting documented with its environment
variable and default, the Quick start exactly two commands, every linked file present, the demo
table saying what the demo itself says it will show."""

from __future__ import annotations

import random
import re
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from remediator.demo.scenario import Fleet, plan_episode
from remediator.settings import Settings
from remediator.sim.fleet import INFER_POOL
from remediator.sim.kube.api.kobj import POOL_LABEL

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()


def _models(kind: Any) -> list[type[BaseModel]]:
    """The models a field holds: itself, or every member of a union of models (`provider`)."""
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return [kind]
    members = tuple(
        get_args(m)[0] if get_origin(m) is Annotated else m
        for m in (get_args(kind) if get_origin(kind) in (Union, UnionType) else ())
    )
    if members and all(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
        return list(members)
    return []


def setting_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths: list[str] = []
    for name, field in model.model_fields.items():
        models = _models(field.annotation)
        if not models:
            paths.append(prefix + name)
        for member in models:
            paths.extend(p for p in setting_paths(member, f"{prefix}{name}.") if p not in paths)
    return paths


def test_every_setting_has_a_row_with_its_environment_variable() -> None:
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(r"^\| `([a-z_.]+)` \| `(REMEDIATOR_[A-Z_]+)` \|", README, re.M)
    }
    paths = setting_paths(Settings)
    assert sorted(rows) == sorted(paths)
    for path in paths:
        assert rows[path] == "REMEDIATOR_" + path.upper().replace(".", "__")


def test_quick_start_is_exactly_make_demo_and_make_test() -> None:
    section = README.split("## Quick start", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["make demo", "make test"]


def test_relative_links_point_at_files_that_exist() -> None:
    for doc in (ROOT / "README.md", ROOT / "docs" / "nodepool-api.md"):
        for target in re.findall(r"\]\(([^)#]+)\)", doc.read_text()):
            if "://" in target:
                continue
            assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def test_the_demo_table_says_where_xid_48_without_spares_is_held_as_the_demo_does() -> None:
    """The row and the demo's own "expect:" line for it tell one story: drained, reset,
    diagnosed, then held at the replacement, not before any pod is evicted."""
    (row,) = [line for line in README.splitlines() if line.startswith("| XID 48 ")]
    shown = re.sub(r"[*_]", "", row.split("|")[2]).strip()
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    nodes = [{"metadata": {"name": "i0", "labels": {POOL_LABEL: INFER_POOL}}, "status": ready}]
    fleet = Fleet.from_json(nodes, [])
    episode = plan_episode("no-capacity", fleet, frozenset(), random.Random(0), serial=1)
    assert episode is not None
    story = episode.expect.split(":")[0]
    assert shown.startswith(story), (shown, story)
