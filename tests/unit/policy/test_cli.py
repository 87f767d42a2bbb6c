"""The real `remediator policy` command, as CI runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REMEDIATOR = Path(sys.executable).parent / "remediator"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REMEDIATOR), "policy", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_validate_the_shipped_policies() -> None:
    done = run("validate", "policies")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    assert "policies in 12 files, sha256 " in lines[0]
    assert ", commit " in lines[0]


def test_validate_reports_every_problem(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "policies:\n  - name: x\n    description: d\n    why: w\n"
        "    match: {kind: xid, codes: [79]}\n    actions: [{action: replace}]\n    extra: 1\n"
    )
    (tmp_path / "settings.yaml").write_text("default_cooldown: soon\n")
    done = run("validate", tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "a.yaml:7: policies[0].extra: unknown field",
        "settings.yaml:1: default_cooldown: invalid duration 'soon': "
        "expected e.g. 90s, 2m, 1h30m, 7d",
        f"{tmp_path}: 2 problem(s); policy set refused",
    ]


def test_shipped_scenarios_pass() -> None:
    scenarios = sorted((ROOT / "policies" / "tests").glob("*.yaml"))
    assert len(scenarios) >= 7
    done = run("test", "policies", *scenarios)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout
    assert done.stdout.splitlines()[-1].endswith(" passed, 0 failed")


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    scenario = tmp_path / "wrong.yaml"
    scenario.write_text(
        """\
scenarios:
  - name: 77 degrees is not hot
    fleet: [{name: n1, pool: train}]
    timeline:
      - {at: 0s, every: 30s, until: 5m, signals: [{node: n1, kind: thermal, gpu: 0, value: 77}]}
    expect:
      - {at: 5m, node: n1, policy: gpu-overheat}
      - {at: 5m, node: n1, policy: none}
      - {at: 5m, node: n1, policy: gpu-overheet}
"""
    )
    done = run("test", "policies", scenario)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "wrong.yaml: FAIL 77 degrees is not hot @5m n1: expected gpu-overheat (admitted), got none",
        "wrong.yaml: PASS 77 degrees is not hot @5m n1: expected none",
        "wrong.yaml: FAIL 77 degrees is not hot @5m n1: expected gpu-overheet (admitted), "
        "got no such policy in the set",
        "1 passed, 2 failed",
    ]


def test_a_malformed_scenario_names_file_line_and_field(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(
        "scenarios:\n  - name: s\n    fleet: [{name: n1, pool: p}]\n"
        "    expect:\n      - {at: soon, node: n1, policy: none}\n"
    )
    done = run("test", "policies", scenario)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{scenario}:5: scenarios[0].expect[0].at: invalid duration 'soon': "
        "expected e.g. 90s, 2m, 1h30m, 7d"
    ]


def test_validate_names_the_file_and_line_of_a_bad_fleet_breaker(tmp_path: Path) -> None:
    (tmp_path / "settings.yaml").write_text(
        "max_concurrent: 5\nfleet_breaker:\n  enabled: true\n  max_new_faults: {count: 0}\n"
        "  window: 10m\n"
    )
    done = run("validate", tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines()[0].startswith("settings.yaml:")
    assert "fleet_breaker" in done.stderr.splitlines()[0]
    assert "max_new_faults.count must be at least 1" in done.stderr
    (tmp_path / "settings.yaml").write_text("fleet_breaker:\n  enabled: true\n  window: 10m\n")
    assert run("validate", tmp_path).returncode == 0
