"""The reliability page, its CSV and its API over ledger rows in a real database."""

from __future__ import annotations

import csv
import io
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from remediator.kube.client import KubeClient
from remediator.ledger.identity import machine_id
from remediator.ledger.store import Ledger
from remediator.signals.model import Signal, SignalKind
from remediator.store.db import session_scope
from remediator.store.models import LedgerGpu, LedgerLink, LedgerMachine, LedgerPlacement
from tests.fixtures.sim import SimHandle
from tests.fixtures.web import READONLY_TOKEN, build_console

HEADERS = {"authorization": f"Bearer {READONLY_TOKEN}"}
POOL = "simcloud.io/nodepool"
UUID_A = "GPU-3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"
UUID_B = "GPU-8e1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b"


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
                    first_seen_at=now - 2 * year,
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
                    first_seen_at=now - 2 * year,
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
                    from_at=now - 2 * year,
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
        page = client.get("/reliability?days=730", headers=HEADERS)
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


def test_every_gpu_in_service_is_counted_from_when_its_machine_was(
    sim_factory: Callable[..., SimHandle], sqlite_head_template: Path, tmp_path: Path
) -> None:
    """A GPU first known to the ledger at its fault (DCGM's labels carry no model, no agent
    runs) was in service since its machine was, beside seven others on its node and eight on the
    next: 16 GPUs for a year, one fault episode (two remediations 6 minutes apart), not 124,204
    failures per GPU-year. The model is the nodes' label. A day of it is too little data."""
    sim = sim_factory(nodes=2, gpus_per_node=8, provision_delay=0.3)
    kube = KubeClient.from_kubeconfig(sim.kubeconfig)
    try:
        nodes = kube.list_nodes()
        shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
        console = build_console(f"sqlite:///{tmp_path / 'remediator.db'}")
        console.deps.list_nodes = kube.list_nodes
        now = console.clock.now()
        ledger = Ledger(console.repository.session_factory, "test", console.clock)
        for n in nodes:
            machine = machine_id(n.provider_id, n.annotations)
            assert machine is not None
            ledger.observe_machine(n.name, machine, now - timedelta(days=400))

        def fault(node: str, uuid: str, index: int, at: datetime, remediations: list[int]) -> None:
            signal = Signal(
                node=node,
                kind=SignalKind.XID,
                source="prometheus",
                observed_at=at,
                gpu=index,
                gpu_uuid=uuid,
                code=79,
                labels={"pci_bus_id": f"00000000:{0x18 + index:02X}:00.0"},
            )
            (resolved,) = ledger.resolve([signal])
            ledger.link_signals([resolved])
            for k, ref in enumerate(remediations):
                ledger.link_remediation(
                    ref, node, [resolved], at + timedelta(minutes=4 + 6 * k), {}
                )

        first, second = sorted(n.name for n in nodes)
        fault(first, UUID_A, 3, now - timedelta(days=10), [1, 2])
        product = {n.name: n.labels["nvidia.com/gpu.product"] for n in nodes}
        with TestClient(console.app) as client:
            body = client.get("/api/v1/reliability?days=365", headers=HEADERS).json()
            overall = body["overall"]
            assert (overall["gpus"], overall["failures"]) == (16, 1)
            assert overall["gpu_years"] == pytest.approx(16 * 365 / 365.25, rel=1e-3)
            assert overall["failures_per_gpu_year"] == pytest.approx(1 / overall["gpu_years"])
            assert overall["mtbf_hours"] == pytest.approx(overall["gpu_years"] * 8766, rel=1e-3)
            by_model = {(r["key"], r["gpus"], r["failures"]) for r in body["by_model"]}
            if product[first] == product[second]:
                assert by_model == {(product[first], 16, 1)}
            else:
                assert by_model == {(product[first], 8, 1), (product[second], 8, 0)}
            assert {r["key"] for r in body["by_pool"]} == {n.labels[POOL] for n in nodes}
            page = client.get("/reliability?days=365", headers=HEADERS)
            assert f"{1 / overall['gpu_years']:.3f}" in page.text

            fault(second, UUID_B, 5, now - timedelta(hours=2), [3])
            day = client.get("/api/v1/reliability?days=1", headers=HEADERS).json()["overall"]
            assert (day["gpus"], day["failures"]) == (16, 1)
            assert day["failures_per_gpu_year"] is None and day["mtbf_hours"] is None
            assert day["enough_data"] is False
            page = client.get("/reliability?days=1", headers=HEADERS)
            assert "too little data" in page.text
    finally:
        kube.close()
