"""Problem 6 end to end: out-of-range items pushed to the real controller (over HTTP, against
the simulator) are refused one by one with their reasons, a GPU index beyond the node's GPUs and
an unknown node are dropped before evaluation, and the good XID 79 beside them proceeds. Nothing
out of bounds reaches the database (an XID code of 10^20 once broke the intake job there)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.controller.app import Controller
from remediator.store.records import RemediationFilter
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import settings_for, wait_for, write_policies

pytestmark = pytest.mark.integration

TOKEN = "operator-token"


@pytest.fixture
def controller(sim: SimHandle, sqlite_head_template: Path, tmp_path: Path) -> Iterator[Controller]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    url = f"sqlite:///{tmp_path / 'remediator.db'}"
    built = Controller(settings_for(sim, url, write_policies(tmp_path / "policies")), sources=[])
    built.start()
    yield built
    built.stop()


def item(node: str, **fields: Any) -> dict[str, Any]:
    base = {"node": node, "kind": "xid", "code": 79, "gpu": 0, "source": "push"}
    return base | {"observed_at": datetime.now(UTC).isoformat()} | fields


def test_bad_items_are_refused_alone_and_the_good_xid_proceeds(
    controller: Controller, sim: SimHandle
) -> None:
    """#39 item 9: a GPU index beyond the node's GPUs and an unknown node were answered 202
    "accepted" and then dropped unseen; they are refused at the door with their reasons, as a
    heartbeat for an unknown node is, and counted per lane and reason."""
    out = sim.kubectl("get", "nodes", "-o", "json")
    nodes = sorted(i["metadata"]["name"] for i in json.loads(out)["items"])
    batch = [
        item(nodes[1], code=10**20),
        item(nodes[1], kind="thermal", code=None, value=float("nan")),
        item(nodes[2], gpu=8),  # the simulator's nodes have 8 GPUs: 0..7
        item("old-host-7"),
        item(nodes[0]),
    ]
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    url = f"{controller.web_url}/api/v1/signals"
    response = httpx.post(url, content=json.dumps(batch), headers=headers, timeout=10)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["accepted"] == 1
    reasons = {p["index"]: (p["field"], p["reason"]) for p in body["refused"]}
    assert sorted(reasons) == [0, 1, 2, 3]
    assert "outside 1..65535" in reasons[0][1] and "not a finite number" in reasons[1][1]
    assert reasons[2] == ("gpu", f"{nodes[2]}: GPU index 8 but the node has 8 GPU(s) (0..7)")
    assert reasons[3] == ("node", "old-host-7: no such node in the cluster")

    repo = controller.repository

    def opened() -> list[str]:
        return [r.node for r in repo.list(RemediationFilter(), limit=50).rows]

    wait_for(lambda: opened() == [nodes[0]], 30, "the XID 79 remediation")
    admission = httpx.get(
        f"{controller.web_url}/api/v1/agents/admission", headers=headers, timeout=10
    ).json()
    assert admission["refused"]["signals"] == {"unknown_node": 1, "gpu_out_of_range": 1}
    assert repo.signals_for_node(nodes[1]) == () and repo.signals_for_node(nodes[2]) == ()
    assert repo.signals_for_node("old-host-7") == ()
    assert opened() == [nodes[0]]


def test_a_push_is_acted_on_when_it_arrives_not_at_a_poll_interval(
    sim: SimHandle, sqlite_head_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The push loop sleeps until a put wakes it: with its fallback an hour long, a pushed
    XID 79 still opens its remediation."""
    monkeypatch.setattr("remediator.controller.app.PUSH_FALLBACK_SECONDS", 3600.0)
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    url = f"sqlite:///{tmp_path / 'remediator.db'}"
    built = Controller(settings_for(sim, url, write_policies(tmp_path / "policies")), sources=[])
    built.start()
    try:
        out = sim.kubectl("get", "nodes", "-o", "json")
        first, second = sorted(i["metadata"]["name"] for i in json.loads(out)["items"])[2:4]

        def remediated() -> set[str]:
            return {r.node for r in built.repository.list(RemediationFilter(), limit=50).rows}

        for node in (first, second):  # the second lands after the loop's first wake-up
            response = httpx.post(
                f"{built.web_url}/api/v1/signals",
                content=json.dumps([item(node)]),
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                timeout=10,
            )
            assert response.status_code == 202, response.text
            wait_for(lambda node=node: node in remediated(), 30, f"a remediation of {node}")
        assert remediated() == {first, second}
    finally:
        built.stop()
