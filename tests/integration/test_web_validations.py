"""The burn-in figures in the console: the overview's dead-on-arrival tile and the validations
page (DOA rate by pool, GPU model and provider; time per check), from the timeline's
validation transitions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from remediator.model.states import State
from remediator.signals.model import SignalKind
from tests.fixtures.web import READONLY_TOKEN, Console, Seeder

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def validated(s: Seeder, rid: int, passed: bool, **detail: Any) -> None:
    s.walk(rid, State.QUARANTINED, State.DRAINING, State.REPLACING, State.VALIDATING)
    target = State.VERIFYING if passed else State.REPLACING
    s.clock.advance(30)
    s.repo.transition(
        rid,
        State.VALIDATING,
        target,
        action="validate_done" if passed else "validate_failed",
        actor="controller-0",
        detail={"new_machine": True, **detail},
    )
    s.state[rid] = target


def seed(console: Console) -> None:
    s = Seeder(console)
    checks = [{"check": "dcgm", "passed": True, "seconds": 4.0}]
    seen: list[str] = []
    # The seeder puts nodes named before gpu-node-04 in pool-a, the rest in pool-b.
    for name, (pool, model, provider, passed) in zip(
        ("burn-in-0", "burn-in-1", "burn-in-2", "zz-burn-in-3"),
        [
            ("pool-a", H100, "aws", False),
            ("pool-a", H100, "aws", True),
            ("pool-a", H100, "aws", True),
            ("pool-b", H200, "gce", True),
        ],
        strict=True,
    ):
        rid = s.create(name, "xid-79-fallen-off-bus", SignalKind.XID, 79)
        validated(
            s,
            rid,
            passed,
            node=f"new-{name}",
            pool=pool,
            gpu_model=model,
            provider=provider,
            reason="ok" if passed else "DCGM level 3: PCIe on GPU 2",
            checks=[*checks, {"check": "nccl", "passed": passed, "seconds": 10.0 + len(seen)}],
        )
        seen.append(name)


def test_the_overview_tile_and_the_validations_page(client: TestClient, console: Console) -> None:
    empty = client.get("/", headers=READONLY).text
    assert 'id="doa-tile"' in empty and "0/0" in empty
    seed(console)
    overview = client.get("/", headers=READONLY).text
    assert "1/4" in overview and "dead on arrival" in overview
    page = client.get("/validations", headers=READONLY)
    assert page.status_code == 200
    text = page.text
    assert "1 of 4 new machines (25.0%)" in text
    assert ">pool-a</a>" in text
    assert f"<td>{H100}</td><td>3</td><td>1</td><td>33.3%</td>" in text
    assert "<td>gce</td><td>1</td><td>0</td><td>0.0%</td>" in text
    assert "<td>dcgm</td><td>4</td><td>4.0 s</td>" in text
    assert "<td>nccl</td><td>4</td><td>12.0 s</td><td>13.0 s</td>" in text
    assert "PCIe on GPU 2" in text
    pool = client.get("/validations?pool=pool-b", headers=READONLY).text
    assert "0 of 1 new machines" in pool


def test_validations_as_json_newest_first_filtered_and_paged(
    client: TestClient, console: Console
) -> None:
    seed(console)
    got = client.get("/api/v1/validations", headers=READONLY)
    assert got.status_code == 200, got.text
    items = got.json()["items"]
    assert [i["node"] for i in items] == [
        "new-zz-burn-in-3",
        "new-burn-in-2",
        "new-burn-in-1",
        "new-burn-in-0",
    ]
    assert got.json()["next_cursor"] is None
    failed = items[-1]
    assert failed["passed"] is False and failed["new_machine"] is True
    assert failed["pool"] == "pool-a" and failed["gpu_model"] == H100
    assert failed["provider"] == "aws" and failed["reason"] == "DCGM level 3: PCIe on GPU 2"
    assert [(c["check"], c["passed"], c["seconds"]) for c in failed["checks"]] == [
        ("dcgm", True, 4.0),
        ("nccl", False, 10.0),
    ]
    assert isinstance(failed["remediation_id"], int) and failed["at"]

    pool_a = client.get("/api/v1/validations?pool=pool-a&passed=false", headers=READONLY)
    assert [i["node"] for i in pool_a.json()["items"]] == ["new-burn-in-0"]
    one = client.get("/api/v1/validations?node=new-burn-in-1", headers=READONLY).json()
    assert [i["node"] for i in one["items"]] == ["new-burn-in-1"]

    first = client.get("/api/v1/validations?limit=3", headers=READONLY).json()
    assert len(first["items"]) == 3 and first["next_cursor"]
    rest = client.get(
        f"/api/v1/validations?limit=3&cursor={first['next_cursor']}", headers=READONLY
    ).json()
    assert [i["node"] for i in rest["items"]] == ["new-burn-in-0"]
    assert rest["next_cursor"] is None

    assert client.get("/api/v1/validations?cursor=bogus", headers=READONLY).status_code == 422
    assert client.get("/api/v1/validations").status_code == 401
    schema = client.get("/api/v1/openapi.json", headers=READONLY).json()
    listed = schema["paths"]["/api/v1/validations"]["get"]
    ref = listed["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/ValidationPageOut")
