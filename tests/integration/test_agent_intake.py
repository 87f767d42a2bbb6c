"""The agents' intake through the real HTTP API (uvicorn) and the agent's own client: heartbeats
coalesced into batched writes while the API reads the newest figures, a heartbeat for a node
the cluster lacks refused and counted, and one flooding agent limited without starving others."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from remediator.agent import report
from remediator.agent.heartbeat import HeartbeatLoop, Pacing
from remediator.agent.http import HttpClient
from remediator.agent.push import HEARTBEAT_PATH, SIGNALS_PATH
from remediator.agent.stats import Stats
from remediator.ledger.identity import GpuIdentity, HostHardware, pci
from tests.fixtures.web import PUSH_TOKEN, READONLY_TOKEN
from tests.integration.agent_support import PushServer, wait_for

pytestmark = pytest.mark.integration

STARTED = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture
def server(sqlite_head_template: Path, tmp_path: Path) -> Iterator[PushServer]:
    running = PushServer(tmp_path / "controller.db", sqlite_head_template).start()
    try:
        yield running
    finally:
        running.stop()
        running.console.repository.session_factory.kw["bind"].dispose()


@pytest.fixture
def agent(server: PushServer) -> Iterator[HttpClient]:
    client = HttpClient(server.url, headers={"Authorization": f"Bearer {PUSH_TOKEN}"})
    yield client
    client.close()


@pytest.fixture
def reader(server: PushServer) -> Iterator[HttpClient]:
    client = HttpClient(server.url, headers={"Authorization": f"Bearer {READONLY_TOKEN}"})
    yield client
    client.close()


def heartbeat(client: HttpClient, node: str) -> Any:
    body = report.heartbeat(node, "agent-1", "1.0", STARTED, {"records_read": 1})
    return client.post(HEARTBEAT_PATH, body)


class Writes:
    def __init__(self, engine: Engine) -> None:
        self.statements = 0
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO AGENT_HEARTBEATS"):
            self.statements += 1


def test_heartbeats_are_written_in_batches_and_read_fresh(
    server: PushServer, agent: HttpClient, reader: HttpClient
) -> None:
    clock = server.console.clock
    writes = Writes(server.console.repository.session_factory.kw["bind"])
    nodes = [f"gpu-node-{i:02d}" for i in range(20)]
    for _round in range(3):  # three rounds 2 s apart: 60 heartbeats
        for node in nodes:
            assert heartbeat(agent, node).status == 200
        clock.advance(2)
    # New agents are news (written with the next heartbeat, in one batch), then one per 5 s.
    wait_for("the first batch", lambda: writes.statements == 1)
    listed = reader.get("/api/v1/agents").json()
    assert [a["node"] for a in listed] == nodes
    newest = clock.now().timestamp() - 2  # the last round, as the API reads it from memory
    assert {datetime.fromisoformat(a["seen_at"]).timestamp() for a in listed} == {newest}

    clock.advance(5)
    assert heartbeat(agent, nodes[0]).status == 200  # due: its background write takes all 20
    book = server.console.deps.heartbeats
    assert book is not None
    wait_for("the second batch committed", lambda: book.stats().flushes == 2)
    assert writes.statements == 2
    stored = {s.node: s.seen_at.timestamp() for s in server.console.repository.agent_statuses()}
    assert stored == {node: newest for node in nodes[1:]} | {nodes[0]: clock.now().timestamp()}
    admission = reader.get("/api/v1/agents/admission").json()
    assert admission["admitted"]["heartbeat"] == 61
    assert (admission["heartbeat_flushes"], admission["heartbeat_rows_written"]) == (2, 40)


def test_a_heartbeat_for_a_node_the_cluster_lacks_is_refused_and_counted(
    server: PushServer, agent: HttpClient, reader: HttpClient
) -> None:
    server.console.deps.node_known = lambda node: node == "gpu-node-01"
    answer = heartbeat(agent, "gpu-node-99")
    assert answer.status == 422
    assert answer.json()["reason"] == "gpu-node-99: no such node in the cluster"
    assert heartbeat(agent, "gpu-node-01").status == 200
    assert [a["node"] for a in reader.get("/api/v1/agents").json()] == ["gpu-node-01"]
    assert reader.get("/api/v1/agents/admission").json()["refused"]["heartbeat"] == {
        "unknown_node": 1
    }
    metrics = reader.get("/metrics").text
    assert 'remediator_push_refused_total{lane="heartbeat",reason="unknown_node"} 1.0' in metrics


def test_one_flooding_agent_is_limited_and_shown_while_others_go_on(
    server: PushServer, agent: HttpClient, reader: HttpClient
) -> None:
    answers = [heartbeat(agent, "gpu-node-01").status for _ in range(10)]
    assert answers == [200, 200, 200] + [429] * 7  # a burst of 3, then 1 per 2 s
    limited = heartbeat(agent, "gpu-node-01")
    assert limited.status == 429 and int(limited.headers["retry-after"]) == 2
    assert "faster than 0.5/s" in limited.json()["reason"]
    assert heartbeat(agent, "gpu-node-02").status == 200  # not starved

    xid = {"node": "gpu-node-01", "kind": "xid", "source": "agent", "gpu": 0, "code": 79}
    stamped = {**xid, "observed_at": server.console.clock.now().isoformat()}
    assert agent.post(SIGNALS_PATH, [stamped] * 200).status == 202  # a node's burst of XIDs
    flood = agent.post(SIGNALS_PATH, [stamped] * 5)
    assert flood.status == 429 and int(flood.headers["retry-after"]) >= 1
    other = agent.post(SIGNALS_PATH, [{**stamped, "node": "gpu-node-02"}])
    assert other.status == 202
    mixed = agent.post(SIGNALS_PATH, [stamped, {**stamped, "node": "gpu-node-03"}])
    assert mixed.status == 202 and mixed.json()["accepted"] == 1
    assert "gpu-node-01 sends signals faster than 20/s" in mixed.json()["refused"][0]["reason"]
    assert [s.node for s in server.signals()][-2:] == ["gpu-node-02", "gpu-node-03"]

    shown = reader.get("/api/v1/agents/admission").json()
    assert shown["refused"] == {
        "heartbeat": {"node_rate": 8},
        "signals": {"node_rate": 6},
    }
    assert shown["most_refused_nodes"] == [{"node": "gpu-node-01", "refused": 14}]
    server.console.clock.advance(2)  # the buckets refill on the (test's) clock
    assert heartbeat(agent, "gpu-node-01").status == 200


def test_the_agents_heartbeat_loop_spreads_backs_off_and_obeys_429(
    server: PushServer, agent: HttpClient
) -> None:
    """The agent's own loop and client against the real server: the delays it would wait."""
    loop = HeartbeatLoop(
        agent,
        lambda: report.heartbeat("gpu-node-01", "agent-1", "1.0", STARTED, {}),
        Stats(),
        Pacing(period=10.0, cap=30.0),
        draw=random.Random(7).uniform,
    )
    steady = [loop.run_once() for _ in range(3)]  # the node's burst of 3
    assert all(8.0 <= d <= 12.0 for d in steady) and loop.failures == 0
    throttled = loop.run_once()  # the 4th at once: 429, Retry-After 2
    assert loop.failures == 1 and 2.0 <= throttled <= 3.0

    server.stop()  # the controller restarts: no answer at all
    down = [loop.run_once() for _ in range(3)]
    assert all(10.0 / 3 <= d <= 10.0 for d in down)  # a young failure: retried within a period
    server.start()
    server.console.clock.advance(2)
    assert 8.0 <= loop.run_once() <= 12.0 and loop.failures == 0


def test_hardware_identities_waiting_for_the_ledger_are_shown(
    server: PushServer, agent: HttpClient, reader: HttpClient
) -> None:
    host = HostHardware(
        "SERIAL-1", (GpuIdentity("GPU-1111", pci("00000000:18:00.0"), 0, model="NVIDIA H100"),)
    )
    body = report.heartbeat("gpu-node-00", "agent-1", "1.0", STARTED, {}, host, whole=True)
    assert agent.post(HEARTBEAT_PATH, body).status == 200

    def figure(name: str) -> float:
        for line in reader.get("/metrics").text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not on /metrics")

    assert figure("remediator_hardware_identities_taken_total") == 1
    book = server.console.deps.heartbeats
    assert book is not None
    book.flush()  # the identity goes with the heartbeats' batched write
    assert figure("remediator_hardware_identities_pending") == 0
    with server.console.repository.session_factory() as session:  # the ledger holds it
        serials = session.execute(text("SELECT dmi_serial FROM ledger_machines")).scalars().all()
    assert serials == ["SERIAL-1"]
