"""A validation's nvidia-smi inventory reaches the hardware ledger (#39): after a repaired node
passes its burn-in (the simulator's nvidia-smi answering the real validate Job), each of its
GPUs' pages gives the board serial, model, VBIOS and driver the inventory read, where the
ledger had nothing of them before."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from remediator.model.states import State
from remediator.web.app import create_app
from tests.integration.engine_support import OPERATOR_HEADERS, Engine, xid
from tests.integration.test_engine_validate import (  # noqa: F401 (the fixture)
    H100,
    REPAIR,
    actions,
    pool_node,
    started,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_a_passed_validation_puts_serial_vbios_and_driver_on_the_gpu_pages(
    started: Callable[[str], Engine],  # noqa: F811
) -> None:
    engine = started(REPAIR)
    node = pool_node(engine.sim)
    engine.push(xid(node, code=74))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert done.state is State.SUCCEEDED, (done.error, done.hold_reason)
    (validated,) = actions(done.events, "validate_done")
    (inventory,) = [c for c in validated.detail["checks"] if c["check"] == "inventory"]
    summary, gpus = inventory["inventory"], inventory["gpus"]
    assert len(gpus) == 8 and summary["driver"] and summary["vbios"]

    with TestClient(create_app(engine.controller.web_deps())) as client:
        for gpu in gpus:
            answer = client.get(f"/api/v1/gpus/{gpu['uuid']}", headers=OPERATOR_HEADERS)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            seen = (body["gpu"]["serial"], body["gpu"]["model"])
            assert seen == (gpu["serial"], H100)
            assert (body["gpu"]["vbios"], body["gpu"]["driver"]) == (
                summary["vbios"],
                summary["driver"],
            )
            (placed,) = body["placements"]
            assert (placed["node"], placed["gpu_index"]) == (node, gpu["index"])
        page = client.get(f"/gpus/{gpus[0]['uuid']}", headers=OPERATOR_HEADERS)
        assert page.status_code == 200
        assert summary["driver"] in page.text and summary["vbios"] in page.text
