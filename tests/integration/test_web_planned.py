"""The console's planned-work page over real SQLite and PostgreSQL: each pool's windows with the
next opening, and a planned remediation waiting with its deadline and chosen moment, opened by
the real Intake from an EC2 system-reboot event."""

from __future__ import annotations

import html
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remediator.policy.loader import load_policy_dir
from remediator.remediation.intake import Intake, Inventory
from remediator.signals.maintenance import MaintenanceEvent, MaintenanceOrigin
from tests.fixtures.web import READONLY_TOKEN, REPO_ROOT, START, Console

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}
WINDOWS = """
windows:
  nightly: {start: "0 2 * * *", duration: 4h, timezone: UTC, pools: [train]}
"""


@pytest.fixture
def client(console: Console, tmp_path: Path) -> Iterator[TestClient]:
    directory = tmp_path / "policies"
    shutil.copytree(REPO_ROOT / "policies", directory, ignore=shutil.ignore_patterns("tests"))
    settings = (directory / "settings.yaml").read_text().replace("windows: {}\n", "")
    (directory / "settings.yaml").write_text(settings + WINDOWS)
    console.policies.active = load_policy_dir(directory, loaded_at=START)
    with TestClient(console.app) as test_client:
        yield test_client


def test_the_page_shows_windows_and_a_waiting_plan(client: TestClient, console: Console) -> None:
    empty = client.get("/planned", headers=READONLY)
    assert empty.status_code == 200
    assert "No planned remediation is open." in empty.text
    assert "nightly" in empty.text and "0 2 * * *" in empty.text

    now = console.clock.now()
    not_before = now + timedelta(days=2)
    event = MaintenanceEvent(
        event_id="instance-event-0abc",
        code="system-reboot",
        origin=MaintenanceOrigin.AWS,
        instance_id="i-0abc",
        node="gpu-planned-1",
        window_start=not_before,
        window_end=not_before + timedelta(hours=2),
    )
    policies = console.policies.active
    assert policies is not None
    inventory = Inventory(pools={"gpu-planned-1": "train"}, gpus={"gpu-planned-1": 8})
    intake = Intake(console.repository, actor="test")
    (waiting,) = intake.process([event.signal("aws-events", now)], inventory, policies, now).queued

    page = client.get("/planned", headers=READONLY)
    text = html.unescape(page.text)
    assert page.status_code == 200
    assert f'href="/remediations/{waiting.id}"' in text
    assert "aws-reboot-event" in text and "gpu-planned-1" in text
    assert not_before.isoformat() in text  # the deadline: when AWS would act
    record = console.repository.get(waiting.id)
    assert record is not None and record.next_attempt_at is not None
    assert record.next_attempt_at.isoformat() in text  # the chosen moment
    assert "window nightly" in text
    assert "planned max_concurrent" not in text
    assert "0 of 2 at once, 1 per pool" in text
