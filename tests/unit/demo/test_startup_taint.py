"""`remediator demo` starts its simulator with the policies' startup taint (#26), so the demo's
new machines register with it as a real cluster's would."""

from __future__ import annotations

from pathlib import Path

from remediator.demo.policies import find_policies_dir, startup_taint_of


def test_the_shipped_policies_give_the_demo_their_startup_taint() -> None:
    assert startup_taint_of(find_policies_dir()) == "remediator.io/unvalidated=true:NoSchedule"


def test_policies_without_one_start_the_simulator_without_a_taint(tmp_path: Path) -> None:
    (tmp_path / "settings.yaml").write_text("max_concurrent: 2\n")
    assert startup_taint_of(tmp_path) is None
