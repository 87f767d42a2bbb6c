"""The hardware ledger through the API and the console pages on a real database (SQLite and
PostgreSQL): a GPU's life (where it sat, faults by XID, diagnostics, remediations), a machine's,
the list's filters, 404 for what the ledger does not know, and the remediation page's link."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from remediator.ledger.identity import GpuIdentity, HostHardware
from remediator.ledger.store import Ledger
from remediator.signals.model import Signal, SignalKind
from remediator.store.audit import AuditLog, AuditQuery
from remediator.web import csrf
from remediator.web.auth import SESSION_COOKIE
from remediator.web.hardware import LIFT
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, Console

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}
UUID = "GPU-5f1e2d3c-4b5a-4978-8a6b-1c2d3e4f5a6b"
MODEL = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    ledger = Ledger(console.repository.session_factory, "test", console.clock)
    then = console.clock.now() - timedelta(days=3)
    ledger.observe_machine("gpu-node-01", "aws:i-0abc", then, provider_id="aws:///z/i-0abc")
    ledger.observe_gpus("gpu-node-01", [GpuIdentity(UUID, "0000:18:00.0", 0, model=MODEL)], then)
    xid = Signal(
        node="gpu-node-01",
        kind=SignalKind.XID,
        source="agent",
        observed_at=then,
        code=79,
        gpu_uuid=UUID,
    )
    ledger.link_signals([xid])
    ledger.link_remediation(
        console.ids["done"], "gpu-node-01", [xid], then, {"policy": "xid-79-fallen-off-bus"}
    )
    ledger.link_verdict(
        "gpu-node-01", UUID, False, then, {"remediation_id": console.ids["done"], "level": 2}
    )
    with TestClient(console.app) as test_client:
        yield test_client


def test_a_gpus_life_through_the_api(client: TestClient, console: Console) -> None:
    response = client.get(f"/api/v1/gpus/{UUID}", headers=READONLY)
    assert response.status_code == 200, response.text
    life = response.json()
    assert life["gpu"]["model"] == MODEL and life["gpu"]["faults"] == 1
    assert life["faults_by_xid"] == {"79": 1}
    assert [(p["node"], p["machine_id"], p["to_at"]) for p in life["placements"]] == [
        ("gpu-node-01", "aws:i-0abc", None)
    ]
    assert [r["remediation_id"] for r in life["remediations"]] == [console.ids["done"]]
    assert [d["kind"] for d in life["diagnostics"]] == ["failed"]


def test_the_list_filters_by_model_cluster_and_faults(client: TestClient) -> None:
    def listed(**params: object) -> list[str]:
        response = client.get("/api/v1/gpus", params=params, headers=READONLY)
        assert response.status_code == 200, response.text
        return [g["uuid"] for g in response.json()["gpus"]]

    assert listed() == [UUID]
    assert listed(model=MODEL, cluster="test", min_faults=1) == [UUID]
    assert listed(min_faults=2) == []
    assert listed(model="NVIDIA A100-SXM4-80GB") == []
    assert listed(cluster="elsewhere") == []


def test_a_machines_life_and_what_the_ledger_does_not_know(client: TestClient) -> None:
    response = client.get("/api/v1/machines/aws:i-0abc", headers=READONLY)
    assert response.status_code == 200, response.text
    machine = response.json()
    assert machine["node"] == "gpu-node-01" and machine["provider_id"] == "aws:///z/i-0abc"
    assert [p["gpu_uuid"] for p in machine["placements"]] == [UUID]
    assert client.get("/api/v1/machines/aws:i-none", headers=READONLY).status_code == 404
    assert client.get("/api/v1/gpus/GPU-unknown", headers=READONLY).status_code == 404
    assert client.get(f"/api/v1/gpus/{UUID}").status_code == 401


def test_the_pages_and_the_remediation_pages_link(client: TestClient, console: Console) -> None:
    page = client.get(f"/gpus/{UUID}", headers=READONLY)
    assert page.status_code == 200, page.text
    assert "XID 79 x 1" in page.text and "/machines/aws:i-0abc" in page.text
    assert f"/remediations/{console.ids['done']}" in page.text
    machine = client.get("/machines/aws:i-0abc", headers=READONLY)
    assert machine.status_code == 200 and UUID in machine.text


def test_an_operator_lifts_a_quarantine_audited_with_csrf(
    client: TestClient, console: Console
) -> None:
    """A quarantined machine on its page and in the API; lifting it needs an operator, a
    reason and (from a browser session) the CSRF token; done and refused are audited."""
    ledger = Ledger(console.repository.session_factory, "test", console.clock)
    assert ledger.quarantine(
        "aws:i-0abc", "taken out 3 times", console.clock.now(), remediation_id=console.ids["done"]
    )
    machine = client.get("/api/v1/machines/aws:i-0abc", headers=READONLY).json()
    assert machine["quarantined_by"] == console.ids["done"]
    assert [h["kind"] for h in machine["holds"]] == ["held"]
    page = client.get("/machines/aws:i-0abc", headers=READONLY)
    assert "Quarantined machine since" in page.text and "Lift the quarantine" not in page.text
    path = "/api/v1/machines/aws:i-0abc/lift-quarantine"
    refused = client.post(path, json={"reason": "looks fine"}, headers=READONLY)
    assert refused.status_code == 403
    response = client.post(
        "/login",
        data={"token": OPERATOR_TOKEN, "name": "dana", "next": "/"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    token = csrf.token_for(client.cookies[SESSION_COOKIE])
    page = client.get("/machines/aws:i-0abc")
    assert "Lift the quarantine" in page.text and f'value="{token}"' in page.text
    form = "/machines/aws:i-0abc/lift-quarantine"
    forged = client.post(form, data={"reason": "board replaced"})
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert ledger.quarantined("aws:i-0abc")
    done = client.post(
        form, data={"reason": "board replaced", "csrf_token": token}, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == "/machines/aws:i-0abc"
    assert not ledger.quarantined("aws:i-0abc")
    again = client.post(path, json={"reason": "again"}, headers={csrf.HEADER: token})
    assert again.status_code == 409
    missing = client.post(
        "/api/v1/machines/aws:i-none/lift-quarantine",
        json={"reason": "x"},
        headers={csrf.HEADER: token},
    )
    assert missing.status_code == 404
    audit = AuditLog(console.repository.session_factory, "test").list(AuditQuery(commands=(LIFT,)))
    assert [(a.outcome, a.reason) for a in audit] == [
        ("refused", "x"),
        ("refused", "again"),
        ("done", "board replaced"),
        ("refused", "board replaced"),  # no CSRF token
        ("refused", "looks fine"),  # a read-only token
    ]  # newest first: every refused command is audited, as the done one
    metrics = client.get("/metrics").text
    for outcome, n in (("done", 1), ("refused", 4)):
        line = f'remediator_console_commands_total{{command="{LIFT}",outcome="{outcome}"}} {n}.0'
        assert line in metrics
    assert audit[2].actor.startswith("dana") and audit[2].remediation_id == console.ids["done"]
    machine = client.get("/api/v1/machines/aws:i-0abc").json()
    assert machine["quarantined_at"] is None and machine["hold_lifted_at"] is not None
    assert [h["kind"] for h in machine["holds"]] == ["lifted", "held"]  # newest first


def test_a_lift_with_a_blank_reason_is_refused(client: TestClient, console: Console) -> None:
    """A reason of spaces says nothing: refused by the API (422, as its schema states) and the
    form alike, and the machine stays quarantined."""
    ledger = Ledger(console.repository.session_factory, "test", console.clock)
    assert ledger.quarantine("aws:i-0abc", "taken out 3 times", console.clock.now())
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    for reason in ("   ", " \u00a0"):
        blank = client.post(
            "/api/v1/machines/aws:i-0abc/lift-quarantine", json={"reason": reason}, headers=operator
        )
        assert blank.status_code == 422, blank.text
    form = client.post(
        "/machines/aws:i-0abc/lift-quarantine", data={"reason": "   "}, headers=operator
    )
    assert form.status_code == 422, form.text
    assert ledger.quarantined("aws:i-0abc")


def test_a_diagnosis_naming_the_gpu_is_on_its_page(client: TestClient, console: Console) -> None:
    """A failed DCGM test linked to the GPU it names shows on the GPU's page with its step,
    the tests and the reason."""
    ledger = Ledger(console.repository.session_factory, "test", console.clock)
    detail = {
        "step": "diagnose",
        "remediation_id": console.ids["done"],
        "reason": "DCGM level 2 diagnostics failed on gpu-node-01: pcie on GPU 0",
        "gpu_index": 0,
        "tests": ["pcie"],
    }
    ledger.link_verdict("gpu-node-01", UUID, False, console.clock.now(), detail)
    page = client.get(f"/gpus/{UUID}", headers=READONLY)
    assert page.status_code == 200
    assert "failed (diagnose: pcie)" in page.text
    assert "pcie on GPU 0" in page.text
    life = client.get(f"/api/v1/gpus/{UUID}", headers=READONLY).json()
    assert life["diagnostics"][0]["detail"]["tests"] == ["pcie"]


def test_a_machine_named_in_heartbeats_shows_its_node_names_before_any_fault(
    client: TestClient, console: Console
) -> None:
    """The agent's identity through the push API: the machine and its GPUs are in the ledger
    (with the book's flush) and on the machine's page before any fault."""
    push = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    host = HostHardware(
        "SN-9", (GpuIdentity("GPU-9a9a9a9a-0000-4000-8000-000000000009", "0000:18:00", 0),)
    )
    for node in ("gpu-node-02", "gpu-node-03"):  # reinstalled under another name
        body = {
            "node": node,
            "agent": "a",
            "version": "1",
            "started_at": console.clock.now().isoformat(),
            "hardware_digest": host.digest,
            "hardware": host.wire(),
        }
        answer = client.post("/api/v1/agents/heartbeat", json=body, headers=push)
        assert answer.status_code == 200 and answer.json()["send_hardware"] is False
        assert console.deps.heartbeats is not None
        console.deps.heartbeats.flush()
        console.clock.advance(60)
    machine = client.get("/api/v1/machines/dmi:SN-9", headers=READONLY).json()
    assert machine["dmi_serial"] == "SN-9" and machine["node"] == "gpu-node-03"
    assert [(n["node"], n["detail"].get("was_node")) for n in machine["nodes"]] == [
        ("gpu-node-03", "gpu-node-02"),
        ("gpu-node-02", None),
    ]
    assert [(p["node"], p["to_at"] is None) for p in machine["placements"]] == [
        ("gpu-node-02", False),
        ("gpu-node-03", True),
    ]
    page = client.get("/machines/dmi:SN-9", headers=READONLY)
    assert page.status_code == 200 and "Node names over time" in page.text
    assert "(was gpu-node-02)" in page.text


def test_a_fault_named_by_gpu_index_only_is_the_gpus_once_its_identity_is_known(
    client: TestClient, console: Console
) -> None:
    """An XID pushed by GPU index (no UUID yet, no agent on the node), taken in and remediated
    as the intake does, is recorded by machine and index; when the GPU at that index names
    itself (a DCGM reading, the agent's inventory) the fault and the remediation are its own."""
    ledger = Ledger(console.repository.session_factory, "test", console.clock)
    node, uuid, then = (
        "gpu-node-04",
        "GPU-4b4b4b4b-0000-4000-8000-000000000004",
        console.clock.now(),
    )
    ledger.observe_machine(node, "aws:i-0def", then, provider_id="aws:///z/i-0def")
    pushed = Signal(node=node, kind=SignalKind.XID, source="push", observed_at=then, gpu=3, code=48)
    (taken,) = ledger.resolve([pushed])
    assert taken.gpu_uuid is None
    ledger.link_signals([taken])
    ledger.link_remediation(console.ids["done"], node, [taken], then, {"policy": "xid-48"})

    def faulty() -> list[str]:
        response = client.get("/api/v1/gpus", params={"min_faults": 1}, headers=READONLY)
        assert response.status_code == 200, response.text
        return [g["uuid"] for g in response.json()["gpus"]]

    assert uuid not in faulty()
    console.clock.advance(600)
    # Another GPU of the node names itself first: the fault stays with index 3.
    other = GpuIdentity("GPU-4b4b4b4b-0000-4000-8000-000000000005", "0000:2a:00.0", 1)
    ledger.observe_gpus(node, [other], console.clock.now())
    assert uuid not in faulty()
    ledger.observe_gpus(node, [GpuIdentity(uuid, "0000:5d:00.0", 3)], console.clock.now())
    assert uuid in faulty() and other.uuid not in faulty()
    life = client.get(f"/api/v1/gpus/{uuid}", headers=READONLY).json()
    assert life["gpu"]["faults"] == 1 and life["faults_by_xid"] == {"48": 1}
    assert [r["remediation_id"] for r in life["remediations"]] == [console.ids["done"]]
    # A later restart's ledger (its picture loaded from the database) links nothing twice.
    again = Ledger(console.repository.session_factory, "test", console.clock)
    again.observe_gpus(node, [GpuIdentity(uuid, "0000:5d:00.0", 3)], console.clock.now())
    assert client.get(f"/api/v1/gpus/{uuid}", headers=READONLY).json()["gpu"]["faults"] == 1
