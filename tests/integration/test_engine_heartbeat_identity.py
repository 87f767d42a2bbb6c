"""The hardware a node's agent names in its heartbeat, through the engine and its push API
(issue #28, docs/ledger.md): a quarantined machine's DMI serial arriving from a new node name is
fenced before any fault; a machine that is not held is not; a repeated heartbeat writes nothing
new to the ledger; a malformed identity is a 422 that writes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from remediator.actions.quarantine import ANN_MACHINE_HOLD
from remediator.ledger.identity import GpuIdentity, HostHardware
from remediator.ledger.store import FENCED, HOLD, PLACED
from remediator.remediation.machine_hold import FENCED_REASON
from remediator.store.db import session_scope
from remediator.store.models import LedgerGpu, LedgerLink, LedgerMachine, LedgerPlacement
from remediator.web.app import create_app
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import (
    OPERATOR_HEADERS,
    SETTINGS,
    Engine,
    start_engine,
    wait_for,
)
from tests.integration.test_engine_commands import POLICIES, marks, node_events

pytestmark = pytest.mark.integration

HELD = HostHardware(
    "SN-HELD-0042",
    (
        GpuIdentity("GPU-11111111-2222-3333-4444-000000000000", "0000:18:00", 0, "1650000000042"),
        GpuIdentity("GPU-11111111-2222-3333-4444-000000000001", "0000:2a:00", 1, "1650000000043"),
    ),
)
FREE = HostHardware("SN-FREE-0007", ())


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=4, provision_delay=1.0)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policies.yaml").write_text(POLICIES)
    (policies / "settings.yaml").write_text(
        SETTINGS.format(pool_percent=100, cluster_percent=100, max_concurrent=10, max_new_faults=20)
    )
    # An agent per node, heartbeating faster than the default per-node limit for the test.
    agents = {"heartbeat_per_node_rate": 50.0, "heartbeat_per_node_burst": 50.0}
    handle = start_engine(sim, migrated_database_url, policies, agents=agents)
    yield handle
    handle.close()


def heartbeat(node: str, host: HostHardware, *, whole: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "node": node,
        "agent": f"agent-{node}",
        "version": "test",
        "started_at": datetime.now(UTC).isoformat(),
        "stats": {},
        "hardware_digest": host.digest,
    }
    if whole:
        body["hardware"] = host.wire()
    return body


def ledger_rows(engine: Engine) -> tuple[int, ...]:
    with session_scope(engine.controller.repository.session_factory) as session:
        return tuple(
            int(session.scalar(select(func.count()).select_from(table)) or 0)
            for table in (LedgerMachine, LedgerGpu, LedgerPlacement, LedgerLink)
        )


def test_a_held_serial_from_a_new_node_name_is_fenced_before_any_fault(engine: Engine) -> None:
    arrived, other = "h100-train-0001", "h100-train-0002"
    ledger = engine.controller.ledger
    # The machine was held under a name the cluster no longer has (its XIDs named the serial).
    machine = HELD.machine
    assert machine is not None
    ledger.observe_machine(
        "h100-train-old-0042", machine, datetime.now(UTC), dmi_serial=HELD.dmi_serial
    )
    assert ledger.quarantine(machine, "replaced 3 times within 30 days", datetime.now(UTC))

    with TestClient(create_app(engine.controller.web_deps())) as client:
        post = lambda body: client.post(  # noqa: E731
            "/api/v1/agents/heartbeat", json=body, headers=OPERATOR_HEADERS
        )
        # A digest the controller does not hold for the node: it asks for the identity whole.
        asked = post(heartbeat(arrived, HELD, whole=False))
        assert asked.status_code == 200 and asked.json()["send_hardware"] is True
        taken = post(heartbeat(arrived, HELD, whole=True))
        assert taken.status_code == 200 and taken.json()["send_hardware"] is False
        assert post(heartbeat(other, FREE, whole=True)).json()["send_hardware"] is False

        # The agent's next heartbeat (a digest now); its answer claims the book's batched flush,
        # which hands the identity to the ledger. The flush is also run here, as the book's
        # own background task would: on a loaded machine that task may come later.
        assert post(heartbeat(arrived, HELD, whole=False)).status_code == 200

        def beating_until_fenced() -> bool:
            engine.controller.heartbeats.flush()
            return marks(engine, arrived) == (True, False, True)

        wait_for(beating_until_fenced, 180, f"{arrived} fenced")
        found = engine.node(arrived)
        assert found is not None
        assert found["metadata"]["annotations"][ANN_MACHINE_HOLD] == machine
        events = node_events(engine, arrived)
        assert [e["reason"] for e in events].count(FENCED_REASON) == 1
        assert engine.of_node(arrived) is None  # no fault, no remediation: fenced on arrival
        engine.controller.reconcile()
        assert marks(engine, other) == (False, False, False)

        life = ledger.machine(machine)
        assert life is not None and life.node == arrived
        assert [link.node for link in life.links if link.subject == PLACED] == [
            "h100-train-old-0042",
            arrived,
        ]
        assert [
            link.node for link in life.links if link.subject == HOLD and link.kind == FENCED
        ] == [arrived]
        assert {(p.gpu_uuid, p.node) for p in life.placements} == {
            (g.uuid, arrived) for g in HELD.gpus
        }

        # The heartbeats after: the digest only, nothing new in the ledger, whatever flushes.
        before = ledger_rows(engine)
        for _ in range(5):
            again = post(heartbeat(arrived, HELD, whole=False))
            assert again.status_code == 200 and again.json()["send_hardware"] is False
        engine.controller.heartbeats.flush()
        engine.controller.reconcile()
        assert ledger_rows(engine) == before

        # A malformed identity: 422 at the edge, no row anywhere.
        bad = heartbeat("h100-train-0003", FREE, whole=True)
        bad["hardware"] = {"dmi_serial": "x" * 500, "gpus": [{"uuid": "not-a-gpu"}]}
        refused = post(bad)
        assert refused.status_code == 422, refused.text
        assert {p["field"] for p in refused.json()["detail"]} >= {"body.hardware.dmi_serial"}
        engine.controller.heartbeats.flush()
        assert ledger_rows(engine) == before
        assert engine.controller.heartbeats.status("h100-train-0003") is None
