"""Loader: exact `file:line: field: message` problems, all of them at once, and the last good set
kept by the store."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.errors import PolicyError
from remediator.policy.loader import load_policy_dir
from remediator.policy.watcher import PolicyStore
from remediator.signals.model import SignalKind

REPO_POLICIES = Path(__file__).resolve().parents[3] / "policies"

GOOD = """\
policies:
  - name: hot
    description: too hot
    why: heat kills GPUs
    match:
      kind: thermal
      threshold: {above: 78, clear: 75, for: 2m}
    actions:
      - action: cordon
      - action: drain
        timeout: 10m
        on_timeout: force

  - name: lost
    description: fell off the bus
    why: a dead GPU
    match: {kind: xid, codes: [79]}
    priority: 100
    actions: [{action: replace}]
"""


def write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def problems_of(directory: Path) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(directory)
    return caught.value.problems


def test_loads_a_good_directory(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": GOOD, "settings.yaml": "max_concurrent: 2\ndefault_cooldown: 30m\n"})
    loaded = load_policy_dir(tmp_path)
    assert [p.name for p in loaded.policies] == ["hot", "lost"]
    assert loaded.settings.max_concurrent == 2
    assert loaded.settings.default_cooldown.total_seconds() == 1800
    assert loaded.commit is None and loaded.dirty is False
    assert len(loaded.content_hash) == 64
    assert loaded.files["a.yaml"] == GOOD
    assert loaded.source_dir == tmp_path.resolve()
    hot = loaded.policy("hot")
    assert hot is not None and hot.match.threshold is not None
    assert hot.match.threshold.for_.total_seconds() == 120


def test_source_of_returns_the_policy_as_written(tmp_path: Path) -> None:
    loaded = load_policy_dir(write(tmp_path, {"a.yaml": GOOD}))
    hot = loaded.source_of("hot")
    assert hot is not None
    assert hot.startswith("  - name: hot\n") and hot.endswith("        on_timeout: force\n")
    assert loaded.source_of("lost") == GOOD[GOOD.index("  - name: lost") :]
    assert loaded.source_of("nope") is None


def test_content_hash_changes_with_content_only(tmp_path: Path) -> None:
    first = load_policy_dir(write(tmp_path / "a", {"a.yaml": GOOD}))
    same = load_policy_dir(write(tmp_path / "b", {"a.yaml": GOOD}))
    other = load_policy_dir(write(tmp_path / "c", {"a.yaml": GOOD.replace("78", "80")}))
    assert first.content_hash == same.content_hash != other.content_hash


def test_every_problem_with_file_line_and_field(tmp_path: Path) -> None:
    broken = """\
policies:
  - name: hot
    description: too hot
    why: heat kills GPUs
    match:
      kind: thermal
      threshold:
        above: 78
        for: 2 minutes
    priority: high
    actions:
      - action: drain
        timeout: 10m
        force: true
    colour: red
"""
    other = """\
policies:
  - name: hot
    description: same name
    why: dup
    match: {kind: xid, codes: [79]}
    actions: [{action: notify}]
  - name: incomplete
    match: {kind: lava}
    actions: []
"""
    syntax = "policies:\n  - name: broken\n    why: [unclosed\n"
    settings = "max_concurrent: -1\nstorm_breaker:\n  window: 5\ndry_run: false\ndry_run: true\n"
    write(
        tmp_path, {"a.yaml": broken, "b.yaml": other, "c.yaml": syntax, "settings.yaml": settings}
    )
    assert problems_of(tmp_path) == [
        "a.yaml:9: policies[0].match.threshold.for: invalid duration '2 minutes': "
        "expected e.g. 90s, 2m, 1h30m, 7d",
        "a.yaml:10: policies[0].priority: Input should be a valid integer, "
        "unable to parse string as an integer",
        "a.yaml:14: policies[0].actions[0].force: unknown field",
        "a.yaml:15: policies[0].colour: unknown field",
        "b.yaml:2: policies[0].name: duplicate policy name 'hot' (first defined at a.yaml:2)",
        "b.yaml:7: policies[1].description: required field missing",
        "b.yaml:7: policies[1].why: required field missing",
        "b.yaml:8: policies[1].match.kind: Input should be 'xid', 'thermal', 'nvlink', "
        "'infiniband', 'ecc', 'row_remap', 'gpu_missing', 'node_condition', 'slurm_node', "
        "'maintenance', 'sxid', 'fabric_manager' or 'unvalidated'",
        "b.yaml:9: policies[1].actions: List should have at least 1 item after validation, not 0",
        "c.yaml:4: yaml: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence at line 3)",
        "settings.yaml:5: dry_run: duplicate key 'dry_run'",
        "settings.yaml:1: max_concurrent: Input should be greater than or equal to 0",
        "settings.yaml:3: storm_breaker.window: invalid duration 5: "
        "expected a string such as 90s, 2m, 7d",
    ]


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        (
            "threshold: {above: 78, below: 20}",
            "a.yaml:7: policies[0].match.threshold: give either above or below, not both",
        ),
        (
            "threshold: {above: 78, clear: 80}",
            "a.yaml:7: policies[0].match.threshold: clear (80.0) must not exceed above (78.0)",
        ),
        (
            "burst: {count: 0, within: 5m}",
            "a.yaml:7: policies[0].match.burst.count: Input should be greater than or equal to 1",
        ),
        (
            "repeat: {count: 2, within: 7d, by: rack}",
            "a.yaml:7: policies[0].match.repeat.by: Input should be 'node', 'gpu' or 'machine'",
        ),
        (
            "repeat: {nth: 3, within: 1w}",
            "a.yaml:7: policies[0].match.repeat.within: "
            "invalid duration '1w': expected e.g. 90s, 2m, 1h30m, 7d",
        ),
    ],
)
def test_match_validation(tmp_path: Path, snippet: str, expected: str) -> None:
    text = GOOD.replace("threshold: {above: 78, clear: 75, for: 2m}", snippet)
    assert problems_of(write(tmp_path, {"a.yaml": text})) == [expected]


def test_repeat_of_names_policies_or_signal_kinds_with_file_and_line(tmp_path: Path) -> None:
    text = GOOD.replace(
        "threshold: {above: 78, clear: 75, for: 2m}",
        "repeat:\n        count: 2\n        within: 7d\n        of:\n          - lost\n"
        "          - gpu_missing\n          - lsot",
    )
    assert problems_of(write(tmp_path, {"a.yaml": text})) == [
        "a.yaml:13: policies[0].match.repeat.of[2]: 'lsot' is neither a policy of this set nor "
        "a signal kind (policies: hot, lost; kinds: "
        + ", ".join(sorted(k.value for k in SignalKind))
        + ")"
    ]


def test_repeat_takes_count_or_its_older_name_not_both(tmp_path: Path) -> None:
    text = GOOD.replace(
        "threshold: {above: 78, clear: 75, for: 2m}", "repeat: {count: 2, nth: 2, within: 7d}"
    )
    assert problems_of(write(tmp_path, {"a.yaml": text})) == [
        "a.yaml:7: policies[0].match.repeat: give count only: nth is its older name"
    ]


def test_ladder_order_is_checked(tmp_path: Path) -> None:
    text = GOOD.replace(
        "actions: [{action: replace}]", "actions: [{action: replace}, {action: cordon}]"
    )
    assert problems_of(write(tmp_path, {"a.yaml": text})) == [
        "a.yaml:14: policies[1]: actions must not repeat and must follow the order "
        "cordon → taint → checkpoint → drain → reset_gpu → reboot → diagnose → rma → replace "
        "→ validate → uncordon"
    ]


def test_options_of_another_step_are_unknown_fields(tmp_path: Path) -> None:
    text = GOOD.replace("actions: [{action: replace}]", "actions: [{action: cordon, grace: 30s}]")
    assert problems_of(write(tmp_path, {"a.yaml": text})) == [
        "a.yaml:19: policies[1].actions[0].grace: unknown field"
    ]


def test_structural_problems(tmp_path: Path) -> None:
    write(tmp_path, {"a.yaml": "- just\n- a list\n", "b.yaml": "policies: []\n", "c.yaml": ""})
    assert problems_of(tmp_path) == [
        "a.yaml:1: (top): Input should be a valid dictionary or instance of PolicyFile",
        "b.yaml:1: policies: List should have at least 1 item after validation, not 0",
        "c.yaml:1: file: empty document",
    ]


def test_empty_directory_is_refused(tmp_path: Path) -> None:
    assert problems_of(tmp_path) == [f"{tmp_path}: no policy files (*.yaml)"]


def test_unknown_xid_codes_are_warnings(tmp_path: Path) -> None:
    text = GOOD.replace("codes: [79]", "codes: [79, 9999]")
    loaded = load_policy_dir(write(tmp_path, {"a.yaml": text}))
    assert loaded.warnings == (
        "a.yaml:17: policies[1].match.codes[1]: XID 9999 is not in the catalog",
    )


def test_shipped_policies_load_cleanly() -> None:
    loaded = load_policy_dir(REPO_POLICIES)
    assert loaded.warnings == ()
    assert all(p.why and "\n" not in p.why for p in loaded.policies)
    assert loaded.settings.max_concurrent == 5


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def test_records_git_commit_and_dirty_flag(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    directory = write(repo / "policies", {"a.yaml": GOOD})
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "policies")
    head = git(repo, "rev-parse", "HEAD")
    clean = load_policy_dir(directory)
    assert (clean.commit, clean.dirty) == (head, False)
    (directory / "a.yaml").write_text(GOOD.replace("78", "80"))
    dirty = load_policy_dir(directory)
    assert (dirty.commit, dirty.dirty) == (head, True)


def test_store_keeps_the_last_good_set(tmp_path: Path) -> None:
    clock = FakeClock()
    directory = write(tmp_path, {"a.yaml": GOOD})
    store = PolicyStore(directory, clock)
    assert store.reload_if_changed() is True
    good = store.active
    assert good is not None and good.loaded_at == clock.now()
    assert store.reload_if_changed() is False

    (directory / "a.yaml").write_text(GOOD + "    surprise: 1\n")
    assert store.reload_if_changed() is False
    assert store.active is good
    assert store.last_error is not None
    assert store.last_error.problems == ["a.yaml:20: policies[1].surprise: unknown field"]

    clock.advance(60)
    (directory / "a.yaml").write_text(GOOD.replace("78", "85"))
    assert store.reload_if_changed() is True
    assert store.last_error is None
    assert store.active is not None and store.active is not good
    assert store.active.loaded_at == clock.now()


def test_store_skips_rereading_when_only_mtime_changed(tmp_path: Path) -> None:
    directory = write(tmp_path, {"a.yaml": GOOD})
    store = PolicyStore(directory, FakeClock())
    store.reload_if_changed()
    first = store.active
    stat = (directory / "a.yaml").stat()
    os.utime(directory / "a.yaml", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert store.reload_if_changed() is False
    assert store.active is not None and first is not None
    assert store.active.content_hash == first.content_hash


def test_store_starts_empty_when_the_first_load_fails(tmp_path: Path) -> None:
    store = PolicyStore(write(tmp_path, {"a.yaml": "policies: 3\n"}), FakeClock())
    assert store.reload_if_changed() is False
    assert store.active is None
    assert store.last_error is not None


def test_store_survives_a_vanished_directory(tmp_path: Path) -> None:
    directory = write(tmp_path / "p", {"a.yaml": GOOD})
    store = PolicyStore(directory, FakeClock())
    store.reload_if_changed()
    shutil.rmtree(directory)
    assert store.reload_if_changed() is False
    assert store.active is not None
    assert store.last_error is not None


def test_a_vanished_directory_is_one_error_until_it_returns(tmp_path: Path) -> None:
    directory = write(tmp_path / "p", {"a.yaml": GOOD})
    store = PolicyStore(directory, FakeClock())
    store.reload_if_changed()
    assert store.active is not None
    good = store.active.content_hash
    moved = tmp_path / "moved"
    directory.rename(moved)
    store.reload_if_changed()
    first = store.last_error
    assert first is not None
    store.reload_if_changed()
    assert store.last_error is first  # the controller counts and records each new error once

    moved.rename(directory)
    assert store.reload_if_changed() is False
    assert store.last_error is None
    assert store.active is not None and store.active.content_hash == good
