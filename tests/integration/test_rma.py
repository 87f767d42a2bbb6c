"""End to end (#28): the `rma` step of a real ladder opens a case for the GPU at fault with a
complete evidence bundle, posts it to a ticket system's webhook (a refusal retried, the failure
on the timeline), and the API moves it through its states while the console shows it."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from remediator.agent import report
from remediator.agent.gpus import GpuInfo
from remediator.agent.identity import HostIdentity
from remediator.clock import FakeClock, utcnow
from remediator.kube.client import KubeClient
from remediator.ledger.identity import GpuIdentity
from remediator.model.states import State
from remediator.providers.http import HttpNodePoolProvider
from remediator.remediation.service import RemediationService
from remediator.rma.book import RmaBook
from remediator.rma.bundle import PARTS
from remediator.rma.webhook import RmaWebhook
from remediator.settings import RmaSettings
from remediator.signals.model import Signal
from remediator.signals.xid import parse_kernel_line
from remediator.sim.node.hardware import pci_bus_id
from remediator.sim.node.kernel_log import xid_line
from remediator.store import db
from remediator.store.records import NewRemediation
from remediator.store.repository import Repository
from tests.fixtures.sim import SimHandle
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, build_console
from tests.integration.rma_support import TicketSystem

NODE = "a100-infer-0000"
UUID = "GPU-3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"
# The line the simulated kernel logs for an XID 79 of GPU 2 (sim/node/kernel_log.py).
XID_LINE = xid_line(pci_bus_id(2), 79, "GPU has fallen off the bus.", None, "")
SERIAL, VBIOS, DRIVER = "1652823054567", "92.00.45.00.06", "550.127.08"
DCGM = {"version": "3.3.5", "DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware"}]}}
FAILED_TESTS = [{"test": "GPU Memory", "gpu": "2", "status": "Fail"}]
PASSED_TESTS = [{"test": "GPU Memory", "gpu": "2", "status": "Pass"}]


@pytest.fixture
def tickets() -> Iterator[TicketSystem]:
    system = TicketSystem(refuse=1)
    yield system
    system.stop()


@pytest.fixture
def kube_for() -> Iterator[Callable[[SimHandle], KubeClient]]:
    opened: list[KubeClient] = []

    def open_for(sim: SimHandle) -> KubeClient:
        client = KubeClient.from_kubeconfig(sim.kubeconfig)
        opened.append(client)
        return client

    yield open_for
    for client in opened:
        client.close()


@pytest.fixture
def store(
    sqlite_head_template: Path, tmp_path: Path
) -> Callable[[KubeClient], tuple[Repository, FakeClock, str]]:
    def open_for(kube: KubeClient) -> tuple[Repository, FakeClock, str]:
        seeded = max(n.created_at for n in kube.list_nodes() if n.created_at is not None)
        deadline = time.monotonic() + 30
        while utcnow() < seeded + timedelta(seconds=1):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
        url = f"sqlite:///{tmp_path / 'remediator.db'}"
        clock = FakeClock(seeded + timedelta(milliseconds=500))
        return Repository(db.make_session_factory(db.make_engine(url)), "test", clock), clock, url

    return open_for


def xid(repository: Repository) -> Signal:
    """The XID as the node's agent sends it: the kernel's line read, its GPU from the driver, the
    board serial, VBIOS and driver from nvidia-smi."""
    kernel = parse_kernel_line(XID_LINE)
    assert kernel is not None
    gpu = GpuInfo(kernel.pci, 2, UUID, "NVIDIA A100-SXM4-80GB")
    identity = HostIdentity(
        gpus={kernel.pci: GpuIdentity(UUID, kernel.pci, 2, SERIAL, vbios=VBIOS, driver=DRIVER)}
    )
    sent = report.xid_signal(NODE, kernel, gpu, UUID, repository.now(), identity.labels(kernel.pci))
    return Signal.model_validate(sent)


def diagnosis(repository: Repository, result: str, detail: dict[str, Any]) -> int:
    """The same GPU's earlier remediation on this node, ending with DCGM's diagnostics."""
    record = repository.create(
        NewRemediation(
            node=NODE,
            policy="xid-79",
            reason="xid 79 on GPU 2",
            signals=[xid(repository)],
            ladder=[{"action": "cordon"}, {"action": "drain"}, {"action": "diagnose"}],
        ),
        actor="controller-0",
    )
    walk = [
        (State.DETECTED, State.QUARANTINED, "started", {}),
        (State.QUARANTINED, State.DRAINING, "quarantine_done", {}),
        (State.DRAINING, State.DIAGNOSING, "drain_done", {}),
    ]
    if result == "failed":
        walk.append((State.DIAGNOSING, State.FAILED, "diagnose_failed", detail))
    else:
        walk.append((State.DIAGNOSING, State.UNCORDONING, "diagnose_done", detail))
        walk.append((State.UNCORDONING, State.SUCCEEDED, "uncordon_done", {}))
    for before, after, action, facts in walk:
        repository.transition(record.id, before, after, action=action, actor="c", detail=facts)
    return record.id


def test_the_rma_step_opens_a_case_the_api_moves_and_the_console_shows(
    sim_factory: Callable[..., SimHandle],
    kube_for: Callable[[SimHandle], KubeClient],
    store: Callable[[KubeClient], tuple[Repository, FakeClock, str]],
    tickets: TicketSystem,
) -> None:
    sim = sim_factory(nodes=2, provision_delay=0.3)
    kube = kube_for(sim)
    repository, clock, url = store(kube)
    # The GPU's first fault passed DCGM and went back; its second failed: the evidence.
    passed = diagnosis(repository, "done", {"result": "passed", "tests": PASSED_TESTS})
    clock.advance(60)
    earlier = diagnosis(
        repository, "failed", {"reason": "level 2", "dcgm": DCGM, "tests": FAILED_TESTS}
    )
    settings = RmaSettings(webhook_url=tickets.url, retry_base_seconds=1, retry_max_seconds=2)
    webhook = RmaWebhook(settings)
    service = RemediationService(
        repository,
        kube,
        HttpNodePoolProvider(sim.nodepool_url, max_retries=0),
        clock,
        actor="controller-0",
        rma_webhook=webhook,
    )
    record = repository.create(
        NewRemediation(
            node=NODE,
            policy="xid-79-rma",
            reason="xid 79 on GPU 2, again",
            signals=[xid(repository)],
            ladder=[{"action": "cordon"}, {"action": "rma", "target": "gpu"}],
        ),
        actor="controller-0",
    )
    for _ in range(10):
        after = service.advance(record.id)
        assert after is not None
        if after.state is State.HELD:
            break
    assert after.state is State.HELD
    (opened,) = [e for e in after.events if e.action == "rma_done"]
    case_id = opened.detail["rma_case"]
    assert opened.detail["hardware_id"] == UUID
    # The ticket system refused the first post: on the timeline, and retried with backoff.
    (refusal,) = [e for e in after.events if e.action == "rma_webhook_failed"]
    assert refusal.detail["case"] == case_id and "503" in refusal.detail["error"]
    book = RmaBook(repository.session_factory, "test", clock)
    assert book.get(case_id).webhook_state == "pending"
    assert webhook.deliver_due(book) == 0  # not due yet
    clock.advance(1.0)
    assert webhook.deliver_due(book) == 1
    assert tickets.got.wait(60)
    (posted,) = tickets.bodies
    assert posted["event"] == "rma.opened" and posted["case"]["hardware_id"] == UUID
    assert posted["bundle"]["xid"] and posted["bundle"]["xid"][0].endswith(f" {XID_LINE}")
    assert book.get(case_id).webhook_state == "delivered"

    # A second remediation of the same GPU finds its case open: no second case.
    again = RmaBook(repository.session_factory, "test", clock).open_case_of(UUID)
    assert again is not None and again.id == case_id

    console = build_console(url)
    operator = {"authorization": f"Bearer {OPERATOR_TOKEN}"}
    reader = {"authorization": f"Bearer {READONLY_TOKEN}"}
    with TestClient(console.app) as client:
        archive = client.get(f"/api/v1/rma/{case_id}/bundle", headers=reader)
        assert archive.status_code == 200, archive.text
        assert archive.headers["content-type"] == "application/gzip"
        with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
            names = {m.name.split("/", 1)[1]: m for m in tar.getmembers()}
            assert set(names) == set(PARTS.values())

            def part(name: str) -> str:
                extracted = tar.extractfile(names[name])
                assert extracted is not None
                return extracted.read().decode()

            case = json.loads(part("case.json"))
            assert (case["id"], case["hardware_id"], case["node"]) == (case_id, UUID, NODE)
            hardware = json.loads(part("hardware.json"))
            reported = hardware["reported_by_signals"]
            assert (reported["uuid"], reported["serial"]) == (UUID, SERIAL)
            assert (reported["vbios_version"], reported["driver_version"]) == (VBIOS, DRIVER)
            assert reported["pci_bus_id"] == "0000:3a:00"
            # The kernel's own lines, each whole, as `journalctl -k -o short-iso` prints them.
            lines = part("xid.log").splitlines()
            assert len(lines) == 3
            assert all(line.endswith(f" {NODE} kernel: {XID_LINE}") for line in lines)
            # The failing run is the evidence; the passing one is on its timeline only.
            (failing,) = json.loads(part("dcgm-diagnostics.json"))
            assert (failing["remediation_id"], failing["action"]) == (earlier, "diagnose_failed")
            assert failing["result"]["dcgm"] == DCGM
            assert failing["failed_tests"] == [{"test": "GPU Memory", "gpu": "2", "status": "Fail"}]
            timelines = json.loads(part("timelines.json"))
            assert {t["remediation_id"] for t in timelines} == {record.id, earlier, passed}
            assert isinstance(json.loads(part("placements.json")), list)

        for status in ("acknowledged", "shipped"):
            moved = client.patch(
                f"/api/v1/rma/{case_id}", headers=operator, json={"status": status, "note": "ok"}
            )
            assert moved.status_code == 200, moved.text
            assert (moved.json()["status"], moved.json()["changed"]) == (status, True)
        # The vendor's ticket names the GPU: a duplicate update by UUID changes nothing.
        duplicate = client.patch(
            f"/api/v1/rma/{UUID}", headers=operator, json={"status": "shipped"}
        )
        assert (duplicate.status_code, duplicate.json()["changed"]) == (200, False)
        back = client.patch(f"/api/v1/rma/{case_id}", headers=operator, json={"status": "opened"})
        assert back.status_code == 409 and "only moves forward" in back.json()["reason"]
        unknown = "GPU-00000000-0000-0000-0000-000000000000"
        missing = client.patch(
            f"/api/v1/rma/{unknown}", headers=operator, json={"status": "closed"}
        )
        assert missing.status_code == 404 and unknown in missing.json()["reason"]
        assert client.patch("/api/v1/rma/999", headers=operator, json={"status": "closed"}).json()[
            "reason"
        ] == ("no RMA case 999")
        refused = client.patch(f"/api/v1/rma/{case_id}", headers=reader, json={"status": "closed"})
        assert refused.status_code == 403
        for status in ("replaced", "closed"):
            done = client.patch(
                f"/api/v1/rma/{UUID if status == 'replaced' else case_id}",
                headers=operator,
                json={"status": status},
            )
            assert done.status_code == 200, done.text

        listed = client.get("/api/v1/rma?status=closed", headers=reader).json()["items"]
        assert [c["id"] for c in listed] == [case_id]
        assert [h["status"] for h in listed[0]["history"]] == [
            "opened",
            "acknowledged",
            "shipped",
            "replaced",
            "closed",
        ]
        assert client.get("/api/v1/rma?status=opened", headers=reader).json()["items"] == []
        audit = client.get("/api/v1/audit", headers=reader).json()
        entries = audit["items"] if isinstance(audit, dict) else audit
        outcomes = [e["outcome"] for e in entries if e["command"] == "rma_update"]
        # The move back, the reader's token and the two unknown cases: every refusal audited.
        assert outcomes.count("done") == 4 and outcomes.count("refused") == 2
        assert outcomes.count("not_found") == 2

        page = client.get("/rma", headers=reader)
        assert page.status_code == 200
        assert f'id="rma-{case_id}"' in page.text and "closed" in page.text and UUID in page.text
        detail = client.get(f"/rma/{case_id}", headers=reader)
        assert f"/api/v1/rma/{case_id}/bundle" in detail.text and "acknowledged" in detail.text
    webhook.close()
