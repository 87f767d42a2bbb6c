"""Signals are counted as they come in (by source and kind) and as they are dropped before the
policies (duplicates folded; by source and reason), and the console's HTTP answers by route and
code; no `_created` series on /metrics."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from remediator.clock import FakeClock
from remediator.controller.metrics import ControllerMetrics
from remediator.remediation.intake import Intake, Inventory
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.repository import Repository
from tests.fixtures.web import READONLY_TOKEN, Console

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
NODES = Inventory(pools={"n1": "pool-a", "n2": "pool-a"})


def _xid(node: str, source: str) -> Signal:
    return Signal(node=node, kind=SignalKind.XID, source=source, observed_at=T0, gpu=1, code=79)


def test_duplicates_are_counted_as_dropped(migrated_database_url: str) -> None:
    repo = Repository(
        db.make_session_factory(db.make_engine(migrated_database_url)), "c", FakeClock(T0)
    )
    intake = Intake(repo, actor="controller")
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry, sources=["dcgm", "alertmanager"])
    # Each configured source's drops by reason start at zero: an alert sees the first one.
    assert (
        registry.get_sample_value(
            "remediator_signals_dropped_total", {"source": "dcgm", "reason": "unknown_node"}
        )
        == 0
    )
    batch = [_xid("n1", "dcgm"), _xid("n1", "alertmanager"), _xid("n2", "dcgm")]
    metrics.received("dcgm", [batch[0], batch[2]])
    metrics.received("alertmanager", [batch[1]])
    result = intake.process(batch, NODES, None, T0)
    assert result.folded == {"alertmanager": 1}  # the same fault, seen by a second source
    again = intake.process([_xid("n2", "dcgm")], NODES, None, T0)
    assert again.folded == {"dcgm": 1}
    for folded in (result.folded, again.folded):
        for source, count in folded.items():
            metrics.dropped_count(source, "duplicate", count)

    def dropped(source: str) -> float | None:
        return registry.get_sample_value(
            "remediator_signals_dropped_total", {"source": source, "reason": "duplicate"}
        )

    assert (dropped("alertmanager"), dropped("dcgm")) == (1, 1)
    assert (
        registry.get_sample_value(
            "remediator_signals_received_total", {"source": "dcgm", "kind": "xid"}
        )
        == 2
    )


def test_http_requests_by_route_and_code_without_created_series(shared_console: Console) -> None:
    headers = {"Authorization": f"Bearer {READONLY_TOKEN}"}
    with TestClient(shared_console.app) as client:
        rid = shared_console.ids["done"]
        assert client.get(f"/api/v1/remediations/{rid}", headers=headers).status_code == 200
        assert client.get("/api/v1/remediations/999999", headers=headers).status_code == 404
        text = client.get("/metrics").text
    route = 'route="/api/v1/remediations/{remediation_id}"'
    for code in ("200", "404"):
        line = next(
            (
                row
                for row in text.splitlines()
                if row.startswith("remediator_http_request_duration_seconds_count{")
                and route in row
                and f'code="{code}"' in row
            ),
            None,
        )
        assert line is not None and float(line.rsplit(" ", 1)[1]) >= 1, code
    assert "_created" not in text
