"""The heartbeat lane in front of the real app: it answers valid heartbeats itself, leaves every
error to the route, and turns heartbeats away (429, spread Retry-After, counted) while the event
loop is behind, taking them again once it has caught up."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from remediator.signals.admission import Lane, Refusal
from remediator.web.heartbeat_lane import HeartbeatLane
from remediator.web.metrics import ConsoleMetrics
from tests.fixtures.web import PUSH_TOKEN, READONLY_TOKEN, START, Console, build_console

pytestmark = pytest.mark.integration

PUSH = {"Authorization": f"Bearer {PUSH_TOKEN}"}


@pytest.fixture
def console(sqlite_head_template: Path, tmp_path: Path) -> Iterator[Console]:
    shutil.copyfile(sqlite_head_template, tmp_path / "c.db")
    built = build_console(f"sqlite:///{tmp_path / 'c.db'}")
    yield built
    built.repository.session_factory.kw["bind"].dispose()


def beat(node: str) -> dict[str, object]:
    return {"node": node, "agent": "a", "version": "1", "started_at": START.isoformat()}


def test_behind_means_429_until_the_loop_catches_up(console: Console) -> None:
    asyncio.run(behind_then_caught_up(console))


async def behind_then_caught_up(console: Console) -> None:
    lane = HeartbeatLane(
        console.app, console.deps, ConsoleMetrics(CollectorRegistry()), {}, lag_limit=5.0
    )
    transport = httpx.ASGITransport(app=lane)
    async with httpx.AsyncClient(transport=transport, base_url="http://c") as client:
        lane.lag, lane._probed_at = 6.0, time.monotonic() + 3600  # behind; no probe yet
        shed = await client.post("/api/v1/agents/heartbeat", json=beat("n1"), headers=PUSH)
        assert shed.status_code == 429
        assert 6 <= int(shed.headers["retry-after"]) <= 16
        assert "behind" in shed.json()["reason"]
        assert console.deps.heartbeats is not None
        assert console.deps.heartbeats.status("n1") is None  # nothing recorded

        lane._probed_at = 0.0  # the next request probes the (idle) loop again: the probe
        probing = await client.post("/api/v1/agents/heartbeat", json=beat("n1"), headers=PUSH)
        await asyncio.sleep(0.01)  # runs once the loop is free, and measures it caught up
        taken = await client.post("/api/v1/agents/heartbeat", json=beat("n1"), headers=PUSH)
        assert taken.status_code == 200 and lane.lag < 5.0
        assert console.deps.heartbeats.status("n1") is not None

        # Errors are the route's: a reader's token, a malformed body.
        reader = {"Authorization": f"Bearer {READONLY_TOKEN}"}
        refused = await client.post("/api/v1/agents/heartbeat", json=beat("n2"), headers=reader)
        assert refused.status_code == 403
        bad = await client.post("/api/v1/agents/heartbeat", json={"node": ""}, headers=PUSH)
        assert bad.status_code == 422 and bad.json()["reason"] == "malformed request"
    assert console.deps.admission is not None
    shed_count = 1 + (probing.status_code == 429)
    assert console.deps.admission.refused[(Lane.HEARTBEAT, Refusal.OVERLOADED)] == shed_count
