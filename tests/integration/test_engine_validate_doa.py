"""A replacement that arrives bad in each of the ways the node's own checks see (a slow NVLink,
a down InfiniBand port, a driver other than the pool's) fails its validation with that check
named, is replaced again, and the remediation ends `succeeded` on the next machine; the bad one
is never schedulable. Through the engine against the simulator (`doa_next`), SQLite only: the
database paths are those of tests/integration/test_engine_validate.py."""

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
from tests.integration.test_engine_validate import (
    H100,
    POOL,
    REPLACE,
    Watcher,
    actions,
    policies,
    pool_node,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# The driver is pinned: on a fresh pool no node has passed a validation yet, so there is no
# majority to differ from (a first node is held to the pins only).
PINNED = REPLACE + f'        pins: {{driver: "{DRIVER_VERSION}"}}\n'


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(
        nodes=4, provision_delay=1.0, reboot_delay=1.0, program_time_scale=FAST_PROGRAMS
    )
    started = start_engine(sim, migrated_database_url, policies(tmp_path, PINNED))
    try:
        yield started
    finally:
        started.close()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("fault", "check", "named"),
    [
        ({"type": "nvlink_slow", "fraction": 0.5}, "nccl", f"under the {H100} floor of 400"),
        ({"type": "ib_link_down", "device": "mlx5_3"}, "inventory", "IB mlx5_3 port 1 is Down"),
        (
            {"type": "versions", "driver_version": OTHER_DRIVER},
            "inventory",
            f"driver is {OTHER_DRIVER}, the pool's baseline {DRIVER_VERSION}",
        ),
    ],
    ids=["slow-nvlink", "ib-port-down", "other-driver"],
)
def test_a_bad_replacement_fails_the_check_that_sees_it_and_is_replaced_again(
    engine: Engine, fault: dict[str, Any], check: str, named: str
) -> None:
    node = pool_node(engine.sim)
    engine.nodepool_fault({"type": "doa_next", "pool": POOL, "fault": fault})
    watcher = Watcher(engine)
    try:
        engine.fault({"type": "xid", "node": node, "gpu": 0, "code": 79})
        engine.push(xid(node))
        done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    finally:
        watcher.stop()
    assert done.state is State.SUCCEEDED, (done.error, done.hold_reason)

    replaced = actions(done.events, "replace_done")
    assert len(replaced) == 2 and len({e.detail["operation_id"] for e in replaced}) == 2
    bad, good = (e.detail["new_node"] for e in replaced)
    (failed,) = actions(done.events, "validate_failed")
    assert failed.detail["node"] == bad and failed.detail["replaced_again"] == bad
    assert named in failed.detail["reason"], failed.detail["reason"]
    first = next(c for c in failed.detail["checks"] if not c["passed"])
    assert first["check"] == check and first["reason"] == failed.detail["reason"]

    (passed,) = actions(done.events, "validate_done")
    assert passed.detail["node"] == good
    assert all(c["passed"] for c in passed.detail["checks"]), passed.detail["checks"]
    assert bad not in watcher.schedulable, "the bad machine was never schedulable"
    assert engine.node(bad) is None
