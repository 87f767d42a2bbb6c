"""`remediator demo --clusters 3` end to end: three simulated clusters, three controllers and one
fleet console on one database (the demo's own PostgreSQL, or one SQLite file in WAL mode); the
banner says which database it is; every cluster registers and its faults show in the fleet
console under its name; Ctrl-C stops everything it started."""

from __future__ import annotations

import re
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from remediator.demo.fleet import pg_binary
from tests.e2e.test_demo import DemoProcess, running

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.fixture(params=["postgresql", "sqlite"])
def fleet_demo(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[DemoProcess, str]]:
    if request.param == "postgresql" and pg_binary("initdb") is None:
        pytest.skip("PostgreSQL server binaries are not installed")
    demo = DemoProcess(
        tmp_path / "demo",
        "push",
        4,
        "--clusters",
        "3",
        "--database",
        request.param,
        "--fault-interval",
        "2",
    )
    try:
        yield demo, request.param
    finally:
        demo.kill()


def test_three_clusters_one_database_and_a_truthful_banner(
    fleet_demo: tuple[DemoProcess, str], tmp_path: Path
) -> None:
    demo, database = fleet_demo
    demo.wait_for(r"Press Ctrl-C to stop everything", timeout=240)
    console = demo.wait_for(r"fleet console\s+(http://\S+)/fleet", timeout=1).group(1)
    token = demo.wait_for(r"^  token\s+(\S+)", timeout=1).group(1)
    shown = demo.wait_for(r"^  database\s+(.*)$", timeout=1).group(1)
    if database == "postgresql":
        assert shown.startswith("PostgreSQL at postgresql+psycopg://"), shown
    else:
        assert shown.startswith(f"SQLite {tmp_path / 'demo' / 'fleet.db'} in WAL mode"), shown
    for name in ("alpha", "bravo", "charlie"):
        assert re.search(rf"^  cluster {name}$", demo.output, re.MULTILINE)
    fleet = httpx.Client(
        base_url=console, headers={"Authorization": f"Bearer {token}"}, timeout=30.0
    )

    def faulted() -> set[str]:
        items = fleet.get("/api/v1/clusters").json()["items"]
        assert [c["name"] for c in items] == ["alpha", "bravo", "charlie"]
        assert all(c["registered"] for c in items)
        return {c["name"] for c in items if c["in_flight"] + c["waiting_for_human"]}

    deadline = time.monotonic() + 180
    while faulted() != {"alpha", "bravo", "charlie"}:
        assert time.monotonic() < deadline, f"faults not in every cluster:\n{demo.output}"
        time.sleep(1)
    listed = fleet.get("/api/v1/remediations", params={"cluster": "bravo"}).json()["items"]
    assert listed and all(r["node"] for r in listed)
    children = demo.descendants()
    assert children
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(timeout=90) == 0, demo.output
    assert "stopped. Data and logs are kept in" in demo.output
    left = [pid for pid in children if running(pid)]
    assert left == [], f"left running: {left}"
    if database == "sqlite":
        # WAL is a property of the file: every process that opened it shared one journal.
        with sqlite3.connect(tmp_path / "demo" / "fleet.db") as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
