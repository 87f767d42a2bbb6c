"""The backtest a user runs first, right after watching the demo: its own policies over its own
database, no `--cluster`, while the demo still runs (faults still going, runs still open). It
must report no difference and reproduce every remediation that happened: a backtest that cannot
reproduce an unchanged policy set cannot be trusted with a changed one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.demo.supervisor import find_prometheus
from tests.e2e.test_demo import START_TIMEOUT, DemoProcess, demo_factory, remediations

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(420)]
__all__ = ["demo_factory"]  # the fixture, imported for pytest

ENOUGH = 4  # remediations before the backtest runs, one of them a finished replacement
WAIT = 240.0


@pytest.mark.parametrize("signals", ["prometheus", "push"])
def test_the_demo_backtests_its_own_policies_without_a_difference(
    demo_factory: Any, tmp_path: Path, signals: str
) -> None:
    if signals == "prometheus" and find_prometheus() is None:
        pytest.skip("prometheus is not installed")
    demo: DemoProcess = demo_factory(signals, 8)
    console = demo.wait_for(r"^  console\s+(http://\S+/)$", START_TIMEOUT).group(1)
    token = demo.wait_for(r"^  token\s+(\S+)$", 5).group(1)
    with httpx.Client(timeout=10.0) as client:
        deadline = time.monotonic() + WAIT
        while True:
            items = remediations(client, console, token)
            if len(items) >= ENOUGH and any(r["state"] == "succeeded" for r in items):
                break
            assert time.monotonic() < deadline, f"not there yet: {items}\n{demo.output}"
            time.sleep(1.0)
    data = tmp_path / "demo"
    # The last few seconds are left out: a cycle's decisions are committed just before its
    # readings are archived.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "remediator",
            "policy",
            "backtest",
            str(data / "policies"),
            "--database",
            f"sqlite:///{data / 'remediator.db'}",
            "--until",
            "5s",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert demo.proc.poll() is None, "the demo must still run: its open runs are the point"
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["history"]["remediations"] >= 1
    assert report["baseline"]["readings"] > 0
    assert report["mismatches"] == [], report["mismatches"]
    for key in ("added", "removed", "changed"):
        assert report[key] == [], (key, report[key])
    assert report["holds"]["added"] == report["holds"]["removed"] == []
