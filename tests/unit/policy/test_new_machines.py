"""New-machine validations (#26) have their own concurrency limit instead of the fault budgets
and the breaker: a scale-up is not a fault, but 200 machines still validate in waves."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from remediator.policy.loader import PolicyError, load_policy_dir
from remediator.policy.new_machines import admit_new_machines
from remediator.policy.schema import GlobalSettings, Limit


@dataclass(frozen=True)
class Item:
    node: str
    pool: str | None = "train"


def test_the_default_limit_is_the_stricter_of_20_nodes_and_10_percent_floored_at_5() -> None:
    assert GlobalSettings().new_machines.max_concurrent == Limit(count=20, percent=10, min=5)


def test_validations_are_admitted_up_to_the_limit_counting_those_running() -> None:
    items = [Item(f"gpu-{i:02}") for i in range(25)]
    admitted, held = admit_new_machines(items, Limit(count=20, percent=10, min=5), 2, fleet=29)
    assert [i.node for i in admitted] == ["gpu-00", "gpu-01", "gpu-02"]
    assert len(held) == 22
    assert held[0][1] == "new-machine max_concurrent (5)"


def test_a_count_alone_bounds_a_wave() -> None:
    items = [Item(f"gpu-{i:03}") for i in range(200)]
    admitted, _ = admit_new_machines(items, Limit(count=20), 0, fleet=400)
    assert len(admitted) == 20


def test_a_bad_limit_is_reported_with_its_file_and_line(tmp_path: Path) -> None:
    settings = "max_concurrent: 5\nnew_machines:\n  max_concurrent: -1\n"
    (tmp_path / "settings.yaml").write_text(settings)
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    assert caught.value.problems == [
        "settings.yaml:3: new_machines.max_concurrent.count: "
        "Input should be greater than or equal to 0"
    ]
