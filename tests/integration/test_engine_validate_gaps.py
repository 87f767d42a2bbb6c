"""A configuration gap never consumes a machine, and a pool's baseline is what its in-service
nodes run — through the engine against the simulator, whose nodes print the real programs'
output and carry GPU feature discovery's version labels:
- a policy with no NCCL floor for the pool's GPU model skips the NCCL check with a warning that
  names the model, and the new machine passes on its other checks: one replacement, no second;
- a pool whose in-service majority runs driver 550 with one earlier validated machine on 535: a
  healthy repaired 550 node passes (the 535 machine is named on its timeline as off the pool's
  baseline), and a new machine on 535 is the one that fails and is replaced again."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediator.model.states import State
from remediator.sim.faults.arrivals import OTHER_DRIVER
from remediator.sim.node.hardware import DRIVER_VERSION
from tests.fixtures.sim import FAST_PROGRAMS, SimHandle
from tests.integration.engine_support import Engine, start_engine, xid
from tests.integration.test_engine_validate import H100, POOL, REPAIR, REPLACE, actions, policies

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

A100 = "NVIDIA A100-SXM4-80GB"
NO_H100_FLOOR = REPLACE.replace(f'"{H100}": 400', f'"{A100}": 180').replace(
    "dcgm_level_new: 2", "dcgm_level_new: 2\n        max_replacements: 1"
)


@pytest.fixture
def start(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Callable[[str, int], Engine]]:
    engines: list[Engine] = []

    def started(text: str, nodes: int) -> Engine:
        sim = sim_factory(
            nodes=nodes, provision_delay=1.0, reboot_delay=1.0, program_time_scale=FAST_PROGRAMS
        )
        engine = start_engine(sim, migrated_database_url, policies(tmp_path, text))
        engines.append(engine)
        return engine

    yield started
    for engine in engines:
        engine.close()


def pool_nodes(engine: Engine) -> list[str]:
    names = engine.sim.kubectl("get", "nodes", "-l", f"simcloud.io/nodepool={POOL}", "-o", "name")
    return sorted(names.replace("node/", "").split())


def finished(engine: Engine, node: str) -> Any:
    return engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_model_without_a_floor_skips_nccl_with_a_warning_and_consumes_no_machine(
    start: Callable[[str, int], Engine],
) -> None:
    engine = start(NO_H100_FLOOR, 4)
    node = pool_nodes(engine)[0]
    engine.fault({"type": "xid", "node": node, "gpu": 0, "code": 79})
    engine.push(xid(node))
    done = finished(engine, node)
    assert done.state is State.SUCCEEDED, (done.state, done.hold_reason, done.error)
    assert len(actions(done.events, "replace_done")) == 1, "no healthy machine was consumed"
    assert not actions(done.events, "validate_failed")
    (line,) = [
        e.detail for e in actions(done.events, "validation_check") if e.detail["check"] == "nccl"
    ]
    assert line["skipped"] is True and line["passed"] is False and line["warning"] is True, line
    assert f"no busbw_floor is configured for GPU model {H100!r}" in line["reason"], line
    assert line["busbw_gbps"] > 400, "the all-reduce still ran and its figure is kept"
    (passed,) = actions(done.events, "validate_done")
    assert "nccl skipped" in passed.detail["result"], passed.detail


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_the_baseline_is_the_in_service_majority_not_the_first_validated_machine(
    start: Callable[[str, int], Engine],
) -> None:
    engine = start(REPAIR + REPLACE.split("policies:\n", 1)[1], 6)
    first, healthy, replaced, other = pool_nodes(engine)
    # The pool's first validated machine runs 535, validated while the rest of the pool was
    # out of service: there was nothing to compare it with, so it passed.
    engine.fault({"type": "versions", "node": first, "driver_version": OTHER_DRIVER})
    for node in (healthy, replaced, other):
        engine.sim.kubectl("cordon", node)
    engine.push(xid(first, code=74))
    done = finished(engine, first)
    assert done.state is State.SUCCEEDED, (done.state, done.hold_reason, done.error)
    (passed,) = actions(done.events, "validate_done")
    assert passed.detail["inventory"]["driver"] == OTHER_DRIVER
    for node in (healthy, replaced, other):
        engine.sim.kubectl("uncordon", node)

    # A healthy node of the fleet's driver is repaired: the pool's baseline is its in-service
    # majority (550), not the one validated machine's 535.
    engine.push(xid(healthy, code=74))
    done = finished(engine, healthy)
    assert done.state is State.SUCCEEDED, (done.state, done.hold_reason, done.error)
    assert not actions(done.events, "validate_failed"), done.events
    assert done.new_node is None and done.outcome != "replaced"
    (line,) = [
        e.detail
        for e in actions(done.events, "validation_check")
        if e.detail["check"] == "inventory"
    ]
    assert line["passed"] is True and line["baseline"]["driver"] == DRIVER_VERSION, line
    assert f"off the pool's baseline: {first} (driver {OTHER_DRIVER}" in line["reason"], line
    assert line["off_baseline"] == {first: {"driver": OTHER_DRIVER, "cuda": "12.2"}}

    # A new machine on 535 is the one that fails, against the in-service majority, and is
    # replaced again; no pin in the policy.
    engine.nodepool_fault(
        {
            "type": "doa_next",
            "pool": POOL,
            "fault": {"type": "versions", "driver_version": OTHER_DRIVER},
        }
    )
    engine.fault({"type": "xid", "node": replaced, "gpu": 0, "code": 79})
    engine.push(xid(replaced))
    done = finished(engine, replaced)
    assert done.state is State.SUCCEEDED, (done.state, done.hold_reason, done.error)
    bad, good = (e.detail["new_node"] for e in actions(done.events, "replace_done"))
    (failed,) = actions(done.events, "validate_failed")
    assert failed.detail["node"] == bad
    assert (
        f"driver is {OTHER_DRIVER}, the pool's baseline {DRIVER_VERSION}" in failed.detail["reason"]
    )
    (ok,) = actions(done.events, "validate_done")
    assert ok.detail["node"] == good
