"""The validate step's fields in `policy validate`: each bad value a `file:line` problem, the
last good set kept; a good step stored on the ladder with its checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.errors import PolicyError
from remediator.policy.loader import load_policy_dir
from remediator.policy.watcher import PolicyStore

HEAD = """\
policies:
  - name: lost
    description: fell off the bus
    why: a dead GPU
    match: {kind: xid, codes: [79]}
    actions:
      - action: cordon
      - action: drain
      - action: replace
      - action: validate
"""
FLOOR = '        busbw_floor: {"NVIDIA H100 80GB HBM3": 400}\n'


def problems(tmp_path: Path, step: str) -> list[str]:
    (tmp_path / "a.yaml").write_text(HEAD + step)
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    return caught.value.problems


def test_a_good_validate_step_loads_with_its_checks(tmp_path: Path) -> None:
    pins = "        pins: {driver: 550.90.07, gpu_count: 8, ib_rate: 400}\n"
    (tmp_path / "a.yaml").write_text(HEAD + FLOOR + "        max_replacements: 1\n" + pins)
    loaded = load_policy_dir(tmp_path)
    (step,) = [s for s in loaded.policies[0].actions if s.action == "validate"]
    assert step.checks() == {  # type: ignore[union-attr]
        "dcgm_level": 2,
        "dcgm_level_new": 3,
        "inventory": True,
        "pins": {"driver": "550.90.07", "gpu_count": 8, "ib_rate": 400},
        "nccl": True,
        "busbw_floor": {"NVIDIA H100 80GB HBM3": 400.0},
        "max_replacements": 1,
        "nccl_pair": False,
        "pair_busbw_floor": {},
    }


def test_the_two_node_check_is_off_by_default_and_turned_on_with_its_floor(
    tmp_path: Path,
) -> None:
    pair = '        nccl_pair: true\n        pair_busbw_floor: {"NVIDIA H100 80GB HBM3": 350}\n'
    (tmp_path / "a.yaml").write_text(HEAD + FLOOR + pair)
    (step,) = [s for s in load_policy_dir(tmp_path).policies[0].actions if s.action == "validate"]
    checks = step.checks()  # type: ignore[union-attr]
    assert checks["nccl_pair"] is True
    assert checks["pair_busbw_floor"] == {"NVIDIA H100 80GB HBM3": 350.0}


@pytest.mark.parametrize(
    ("step", "line", "words"),
    [
        ("", 10, "nccl needs busbw_floor"),
        (FLOOR + "        dcgm_level: 5\n", 12, "dcgm_level"),
        (FLOOR + "        max_replacements: -1\n", 12, "max_replacements"),
        ('        busbw_floor: {"NVIDIA H100 80GB HBM3": 0}\n', 11, "busbw_floor"),
        (FLOOR + "        pins: {driver: latest}\n", 12, "pins.driver"),
        (FLOOR + "        pins: {nvlink: fast}\n", 12, "pins.nvlink"),
        (FLOOR + "        two_node: true\n", 12, "two_node"),
        (FLOOR + "        nccl_pair: true\n", 10, "nccl_pair needs pair_busbw_floor"),
        (FLOOR + "        nccl_pair: maybe\n", 12, "nccl_pair"),
        (FLOOR + '        pair_busbw_floor: {"NVIDIA H100 80GB HBM3": 350}\n', 10, "only with"),
        (
            FLOOR
            + '        nccl_pair: true\n        pair_busbw_floor: {"NVIDIA H100 80GB HBM3": -1}\n',
            13,
            "pair_busbw_floor",
        ),
    ],
)
def test_each_bad_field_is_a_file_line_problem(
    tmp_path: Path, step: str, line: int, words: str
) -> None:
    found = problems(tmp_path, step)
    assert len(found) == 1, found
    assert found[0].startswith(f"a.yaml:{line}:") and words in found[0], found


def test_validate_needs_a_repair_or_replace_before_it(tmp_path: Path) -> None:
    text = HEAD.replace("      - action: drain\n      - action: replace\n", "") + FLOOR
    (tmp_path / "a.yaml").write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    assert "validate needs a repair or a replace step before it" in caught.value.problems[0]


def test_a_bad_edit_keeps_the_last_good_set(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(HEAD + FLOOR)
    store = PolicyStore(tmp_path, FakeClock())
    assert store.reload_if_changed()
    good = store.active
    (tmp_path / "a.yaml").write_text(HEAD + FLOOR + "        dcgm_level: 9\n        \n")
    assert not store.reload_if_changed()
    assert store.active is good and store.last_error is not None
    assert store.last_error.problems[0].startswith("a.yaml:12:")
