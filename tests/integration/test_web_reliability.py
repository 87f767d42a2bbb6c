"""The reliability page, its CSV and its API over ledger rows in a real database."""

from __future__ import annotations

import csv
import io
import shutil
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from remediator.store.db import session_scope
from remediator.store.models import LedgerGpu, LedgerLink, LedgerMachine, LedgerPlacement
from tests.fixtures.web import READONLY_TOKEN, build_console

HEADERS = {"authorization": f"Bearer {READONLY_TOKEN}"}


def test_reliability_figures_page_csv_and_api(sqlite_head_template: Path, tmp_path: Path) -> None:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    console = build_console(f"sqlite:///{tmp_path / 'remediator.db'}")
    now = console.clock.now()
    year = timedelta(days=365.25)
    with session_scope(console.repository.session_factory, write=True) as session:
        for i, model in enumerate(("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")):
            uuid, machine = f"GPU-{i}", f"i-{i}"
            session.add(
                LedgerMachine(
                    id=machine,
                    provider_id=f"aws:///us-east-1a/{machine}",
                    cluster="test",
                    node=f"node-{i}",
                    first_seen_at=now - year,
                    last_seen_at=now,
                )
            )
            session.add(
                LedgerGpu(
                    uuid=uuid,
                    serial=f"16528230{i}",
                    model=model,
                    vbios="96.00.89.00.01",
                    driver="550.54.15",
                    first_seen_at=now - year,
                    last_seen_at=now,
                )
            )
            session.flush()
            session.add(
                LedgerPlacement(
                    gpu_uuid=uuid,
                    machine_id=machine,
                    cluster="test",
                    node=f"node-{i}",
                    gpu_index=0,
                    from_at=now - year,
                )
            )
        for days in (30, 20, 10):
            session.add(
                LedgerLink(
                    cluster="test",
                    subject="remediation",
                    ref_id=days,
                    node="node-0",
                    gpu_uuid="GPU-0",
                    machine_id="i-0",
                    kind="xid",
                    code=79,
                    detail={},
                    at=now - timedelta(days=days),
                )
            )
    with TestClient(console.app) as client:
        api = client.get("/api/v1/reliability?days=365", headers=HEADERS)
        assert api.status_code == 200, api.text
        body = api.json()
        assert body["overall"]["failures"] == 3
        by_model = {r["key"]: r for r in body["by_model"]}
        assert by_model["NVIDIA H100 80GB HBM3"]["failures"] == 3
        assert by_model["NVIDIA A100-SXM4-80GB"]["failures"] == 0
        assert body["top_gpus"][0]["id"] == "GPU-0" and body["top_machines"][0]["id"] == "i-0"
        page = client.get("/reliability", headers=HEADERS)
        assert page.status_code == 200 and '<svg class="chart reliability"' in page.text
        assert "NVIDIA H100 80GB HBM3: " in page.text  # the bar's exact figure
        exported = client.get("/reliability.csv", headers=HEADERS)
        assert exported.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        fleet = next(r for r in rows if r["dimension"] == "fleet")
        assert fleet["failures"] == "3" and float(fleet["gpu_years"]) > 1.9
        assert {r["key"] for r in rows if r["dimension"] == "vbios"} == {"96.00.89.00.01"}
        other = client.get("/api/v1/reliability?cluster=other", headers=HEADERS).json()
        assert (other["overall"]["failures"], other["overall"]["gpus"]) == (0, 0)
