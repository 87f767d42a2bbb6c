"""An RMA case's life as the ticket system hears it (#39): every move and every note is its own
webhook event, in order, even when they come close together or a post was refused; a note needs
no move; every refused PATCH (unknown case, read-only token) is an audit row."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remediator.rma.book import AUDIT_COMMAND, NewCase, RmaBook
from remediator.rma.model import Target
from remediator.rma.webhook import RmaWebhook
from remediator.settings import RmaSettings
from remediator.store.audit import AuditLog, AuditQuery
from tests.fixtures.web import OPERATOR_TOKEN, READONLY_TOKEN, Console, build_console
from tests.integration.rma_support import TicketSystem

pytestmark = pytest.mark.integration

UUID = "GPU-3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"
OPERATOR = {"authorization": f"Bearer {OPERATOR_TOKEN}"}
READER = {"authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def console(sqlite_head_template: Path, tmp_path: Path) -> Iterator[Console]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    built = build_console(f"sqlite:///{tmp_path / 'remediator.db'}")
    yield built
    built.repository.session_factory.kw["bind"].dispose()


@pytest.fixture
def tickets() -> Iterator[TicketSystem]:
    system = TicketSystem(refuse=1)
    yield system
    system.stop()


def open_case(console: Console, webhook: bool) -> tuple[RmaBook, int]:
    book = RmaBook(console.repository.session_factory, "test", console.clock)
    case, created = book.open(
        NewCase(Target.GPU, UUID, "gpu-node-01", 2, None, "xid 79 twice"),
        {"case": {}},
        webhook=webhook,
        actor="controller-0",
    )
    assert created
    return book, case.id


def test_each_move_and_note_reaches_the_ticket_system_as_its_own_event_in_order(
    console: Console, tickets: TicketSystem
) -> None:
    book, case_id = open_case(console, webhook=True)
    with TestClient(console.app) as client:
        for status in ("acknowledged", "shipped"):  # close together: before any delivery
            moved = client.patch(
                f"/api/v1/rma/{case_id}", headers=OPERATOR, json={"status": status}
            )
            assert moved.status_code == 200, moved.text
        noted = client.patch(
            f"/api/v1/rma/{UUID}", headers=OPERATOR, json={"note": "tracking 1Z999AA1"}
        )
        assert noted.status_code == 200, noted.text
        assert (noted.json()["status"], noted.json()["changed"]) == ("shipped", True)
        resent = client.patch(
            f"/api/v1/rma/{case_id}", headers=OPERATOR, json={"note": "tracking 1Z999AA1"}
        )
        assert resent.json()["changed"] is False  # a ticket system's resend: written once
    webhook = RmaWebhook(
        RmaSettings(webhook_url=tickets.url, retry_base_seconds=1, retry_max_seconds=2)
    )
    try:
        assert webhook.deliver_due(book) == 0  # the first post refused: nothing after it either
        assert tickets.bodies == []
        console.clock.advance(1.0)
        assert webhook.deliver_due(book) == 4
    finally:
        webhook.close()
    events = [(b["event"], b["case"]["status"], b["change"].get("note")) for b in tickets.bodies]
    assert events == [
        ("rma.opened", "opened", None),
        ("rma.updated", "acknowledged", None),
        ("rma.updated", "shipped", None),
        ("rma.noted", "shipped", "tracking 1Z999AA1"),
    ]
    assert [b["change"]["from"] for b in tickets.bodies] == [
        None,
        "opened",
        "acknowledged",
        "shipped",
    ]
    assert len({b["event_id"] for b in tickets.bodies}) == 4
    case = book.get(case_id)
    assert case.webhook_state == "delivered"
    assert all(line.get("delivered_at") for line in case.history)
    assert webhook.deliver_due(book) == 0 and len(tickets.bodies) == 4


def test_a_note_without_a_move_is_kept_in_the_history_and_audited(console: Console) -> None:
    book, case_id = open_case(console, webhook=False)
    with TestClient(console.app) as client:
        noted = client.patch(
            f"/api/v1/rma/{case_id}", headers=OPERATOR, json={"note": "vendor asked for logs"}
        )
        assert noted.status_code == 200, noted.text
        nothing = client.patch(f"/api/v1/rma/{case_id}", headers=OPERATOR, json={})
        assert nothing.status_code == 422
        page = client.get(f"/rma/{case_id}", headers=READER)
        assert "vendor asked for logs" in page.text
    case = book.get(case_id)
    assert case.status.value == "opened"
    assert [(h["status"], h.get("note")) for h in case.history] == [
        ("opened", None),
        ("opened", "vendor asked for logs"),
    ]
    malformed, noted_entry = AuditLog(console.repository.session_factory, "test").list(
        AuditQuery(commands=(AUDIT_COMMAND,))
    )  # newest first
    assert (noted_entry.outcome, noted_entry.reason) == ("done", "vendor asked for logs")
    assert malformed.outcome == "refused" and "a status, a note or both" in (malformed.detail or "")


def test_every_refused_patch_is_audited(console: Console) -> None:
    _, case_id = open_case(console, webhook=False)
    unknown = "GPU-00000000-0000-0000-0000-000000000000"
    with TestClient(console.app) as client:
        for ref, headers, code in (
            ("999", OPERATOR, 404),
            (unknown, OPERATOR, 404),
            (str(case_id), READER, 403),
        ):
            refused = client.patch(
                f"/api/v1/rma/{ref}", headers=headers, json={"status": "closed", "note": "done"}
            )
            assert refused.status_code == code, refused.text
    audit = AuditLog(console.repository.session_factory, "test").list(
        AuditQuery(commands=(AUDIT_COMMAND,))
    )
    assert [a.outcome for a in audit] == ["refused", "not_found", "not_found"]  # newest first
    details = " | ".join(a.detail or "" for a in audit)
    assert "no RMA case 999" in details and unknown in details
    assert RmaBook(console.repository.session_factory, "test").get(case_id).status.value == "opened"
