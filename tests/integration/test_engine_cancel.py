"""A human's cancel sticks (issue 9, problem 11): after on-call cancels an XID 79 remediation,
the `gpu-missing` policy echoing the same dead GPU must not open another one and replace the node;
a new, distinct fault (another GPU) is still acted on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.model.states import State
from remediator.remediation import commands
from remediator.signals.model import Signal, SignalKind
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, start_engine, wait_for, write_policies, xid

pytestmark = pytest.mark.integration

NODE = "h100-train-0000"  # runs a training gang, so its checkpoint and drain take a while
GPU_MISSING = """
policies:
  - name: gpu-missing
    description: A GPU the node should have is gone.
    why: The driver no longer sees the GPU; jobs on it fail.
    match: {kind: gpu_missing}
    priority: 90
    actions:
      - action: cordon
      - action: checkpoint
        max_grace: 1s
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
"""


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=6, provision_delay=0.3)
    policies = write_policies(tmp_path / "policies", drain_grace=30)
    (policies / "gpu-missing.yaml").write_text(GPU_MISSING)
    handle = start_engine(sim, migrated_database_url, policies)
    yield handle
    handle.close()


def missing(node: str, gpu: int) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind.GPU_MISSING,
        source="push",
        observed_at=datetime.now(UTC),
        gpu=gpu,
    )


def seen(engine: Engine, gpu: int) -> bool:
    return any(
        e.signal.kind is SignalKind.GPU_MISSING and e.signal.gpu == gpu
        for e in engine.repository.signals_for_node(NODE)
    )


def test_a_cancelled_fault_is_not_remediated_again_by_another_policy(engine: Engine) -> None:
    engine.push(xid(NODE, gpu=0))
    first = engine.wait_state(NODE, State.CHECKPOINTING, State.DRAINING)
    cancelled = commands.run(
        engine.repository,
        "cancel",
        first.id,
        actor="carol",
        reason="known driver issue, we keep the node",
        cooldown=timedelta(hours=2),
    )
    assert cancelled.state is State.CANCELLED and cancelled.suppressed_until is not None
    assert cancelled.suppressed_until - datetime.now(UTC) > timedelta(hours=1, minutes=59)

    # The echo of the same dead GPU: decided (the signal is stored), but nothing opens.
    engine.push(missing(NODE, gpu=0))
    wait_for(lambda: seen(engine, 0), what="the echo to be decided")
    assert [r.id for r in engine.remediations() if r.node == NODE] == [first.id]

    # A new, distinct fault on another GPU is acted on (once the cancel's quarantine is lifted).
    engine.controller.reconcile()
    engine.push(missing(NODE, gpu=3))
    second = engine.wait_state(NODE, State.QUARANTINED, State.CHECKPOINTING, State.DRAINING)
    assert second.id != first.id and second.policy == "gpu-missing"
