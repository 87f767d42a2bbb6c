"""The chaos soak (issue #38, `python -m bench soak`) for three minutes on a fixed seed: the real
controller as an HA pair on PostgreSQL against the simulator and a real Slurm, faults of every
kind the first round of seed 1 draws, and the soak's independent checker. The run must find no
invariant violation, take the path it models (exit 0: every kind drawn took effect), fire at
least five kinds, open at least one remediation, and leave no process behind.

Its own PostgreSQL, not the session's: the soak stops and starts its server (`db_outage`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from remediator.sim.slurm.cluster import available
from tests.fixtures.processes import TOKEN_VAR, leftovers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(
    r"soak: (\d+) faults, (\d+) remediations, (\d+) invariant violations \(seed 1, 3 min\)"
)
KIND_ROW = re.compile(r"^  ([a-z_]+)\s+(\d+)\s+(\d+)\s+(\d+)  ", re.MULTILINE)


def test_a_three_minute_soak_on_seed_1_finds_no_violation(tmp_path: Path) -> None:
    if not available():
        pytest.fail("Slurm is not installed: run scripts/setup.sh --system")
    # A token of its own for everything the soak starts, so that what it leaves is found here
    # (and not confused with the rest of the session's processes).
    token = uuid.uuid4().hex
    workdir = tmp_path / "soak"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "soak", "--minutes", "3", "--seed", "1",
         "--workdir", str(workdir)],
        cwd=ROOT,
        env={**os.environ, TOKEN_VAR: token},
        capture_output=True,
        text=True,
        timeout=1100,
    )  # fmt: skip
    out = done.stdout
    tail = f"exit {done.returncode}\n{out[-6000:]}\n{done.stderr[-3000:]}"
    last = LAST_LINE.fullmatch(out.strip().splitlines()[-1])
    assert last is not None, tail
    faults, remediations, violations = (int(g) for g in last.groups())
    assert violations == 0, tail
    assert done.returncode == 0, tail
    took = {kind: int(effect) for kind, _drawn, _fired, effect in KIND_ROW.findall(out)}
    assert sum(1 for count in took.values() if count) >= 5, took
    assert faults >= 5 and remediations >= 1, tail
    assert "left behind: none" in out, tail
    assert leftovers(token, roots=(f"{workdir}/",), settle=5.0) == []
