"""#39 item 9: the repeats of a duplicate within the fold window were answered 202 and never
shown: the store keeps one row per (node, GPU, kind, code) per window, so only the first repeat
was listed. Pushed to the real controller over HTTP (against the simulator), every later repeat
is counted onto that row, "and N more until T", as `GET /api/v1/signals` and the node page show
it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.controller.app import Controller
from remediator.store.records import RemediationFilter
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import settings_for, wait_for, write_policies

pytestmark = pytest.mark.integration

HEADERS = {"Authorization": "Bearer operator-token", "Content-Type": "application/json"}


@pytest.fixture
def controller(sim: SimHandle, migrated_database_url: str, tmp_path: Path) -> Iterator[Controller]:
    policies = write_policies(tmp_path / "policies")
    built = Controller(settings_for(sim, migrated_database_url, policies), sources=[])
    built.start()
    yield built
    built.stop()


def xid79(node: str, at: datetime) -> dict[str, Any]:
    return {
        "node": node,
        "kind": "xid",
        "code": 79,
        "gpu": 0,
        "source": "push",
        "observed_at": at.isoformat(),
    }


def test_every_repeat_within_the_fold_window_is_counted_onto_the_listed_row(
    controller: Controller, sim: SimHandle
) -> None:
    items = json.loads(sim.kubectl("get", "nodes", "-o", "json"))["items"]
    name = sorted(i["metadata"]["name"] for i in items)[0]
    base = datetime.now(UTC).replace(microsecond=0)
    url = controller.web_url

    def push(*seconds: int) -> None:
        batch = [xid79(name, base + timedelta(seconds=s)) for s in seconds]
        answer = httpx.post(
            f"{url}/api/v1/signals", content=json.dumps(batch), headers=HEADERS, timeout=10
        )
        assert answer.status_code == 202 and answer.json()["accepted"] == len(batch), answer.text

    def listed() -> list[str]:
        answer = httpx.get(f"{url}/api/v1/signals", params={"node": name}, headers=HEADERS)
        assert answer.status_code == 200, answer.text
        return [str(item["disposition"]) for item in answer.json()["items"]]

    push(0)
    repo = controller.repository
    wait_for(lambda: bool(repo.list(RemediationFilter(node=name), limit=1).rows), 30, "#1")
    push(10)
    wait_for(lambda: any(d.startswith("folded") for d in listed()), 30, "the folded row")
    push(20, 30)
    push(40)
    until = (base + timedelta(seconds=40)).isoformat()
    counted = f"; and 3 more until {until}"
    wait_for(lambda: any(d.endswith(counted) for d in listed()), 30, f"'{counted}'")
    (folded,) = [d for d in listed() if d.startswith("folded")]
    assert "fold window 5m" in folded and folded.endswith(counted), folded
    page = httpx.get(f"{url}/nodes/{name}", headers=HEADERS, timeout=10)
    assert page.status_code == 200 and f"and 3 more until {until}" in page.text
