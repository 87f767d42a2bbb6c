"""The repair outcome in the console: `outcome` on a remediation in the API, the repaired and
replaced counts and the spares saved on the overview, the outcome tag in lists, and DCGM test
verdicts as a table on the timeline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from remediator.model.states import State
from remediator.signals.model import SignalKind
from tests.fixtures.web import READONLY_TOKEN, Console, Seeder

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}
TESTS = [
    {"category": "Deployment", "test": "Inforom", "gpu": "0", "status": "Pass"},
    {
        "category": "Integration",
        "test": "PCIe",
        "gpu": "2",
        "status": "Fail",
        "detail": "GPU 2: XID 79",
    },
]


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def repaired_and_replaced(console: Console) -> tuple[int, int]:
    s = Seeder(console)
    fixed = s.create("gpu-node-21", "xid-79-fallen-off-bus", SignalKind.XID, 79)
    s.walk(fixed, State.QUARANTINED, State.DRAINING, State.REBOOTING, State.DIAGNOSING)
    s.note(fixed, "diagnose_done", {"level": 1, "tests": TESTS[:1]})
    s.walk(fixed, State.UNCORDONING, State.SUCCEEDED, outcome="repaired")
    gone = s.create("gpu-node-22", "xid-79-fallen-off-bus", SignalKind.XID, 79)
    s.walk(gone, State.QUARANTINED, State.DRAINING, State.REBOOTING, State.DIAGNOSING)
    s.note(gone, "diagnose_failed", {"level": 1, "tests": TESTS, "escalated_to": "replace"})
    s.walk(gone, State.REPLACING, State.VERIFYING)
    s.walk(gone, State.SUCCEEDED, outcome="replaced", new_node="gpu-node-99")
    return fixed, gone


def test_outcome_in_the_api_and_the_overview(client: TestClient, console: Console) -> None:
    fixed, gone = repaired_and_replaced(console)
    assert client.get(f"/api/v1/remediations/{fixed}", headers=READONLY).json()["outcome"] == (
        "repaired"
    )
    assert client.get(f"/api/v1/remediations/{gone}", headers=READONLY).json()["outcome"] == (
        "replaced"
    )
    overview = client.get("/api/v1/overview", headers=READONLY).json()
    assert (overview["repaired"], overview["replaced"], overview["spares_saved"]) == (1, 1, 1)


def test_console_pages_show_outcomes_and_the_diag_table(
    client: TestClient, console: Console
) -> None:
    _, gone = repaired_and_replaced(console)
    listing = client.get("/remediations?state=succeeded", headers=READONLY).text
    assert "outcome-repaired" in listing and "outcome-replaced" in listing
    overview = client.get("/", headers=READONLY).text
    assert "spares saved" in overview and "repaired in 7 days" in overview
    assert 'aria-label="Remediations per day by outcome"' in overview
    assert ">repaired<" in overview and ">replaced<" in overview  # the chart's key
    detail = client.get(f"/remediations/{gone}", headers=READONLY).text
    assert '<table class="diag">' in detail
    assert "PCIe" in detail and "GPU 2: XID 79" in detail
    assert ">replaced</span>" in detail
