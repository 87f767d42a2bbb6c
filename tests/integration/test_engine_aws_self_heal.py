"""An Auto Scaling group that replaces the node itself after a failed launch (issue 39 item 13),
through the real engine against moto: the remediation fails (no capacity), its node is gone, and
once capacity returns the group's new node ends it as replaced. Its outcome is counted once, when
it closes (succeeded), so RemediatorHighFailureRate does not see a failure that healed; a retry
on the gone node is refused with the reason instead of failing on a 404."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.remediation import commands
from remediator.settings import AwsProviderSettings
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import (
    Engine,
    provider_setting,
    settings_for,
    wait_for,
    write_policies,
    xid,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NODE = "h100-train-0000"
POLICY = "xid-79"


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=4, provision_delay=0.3, cloud="aws")
    policies = write_policies(tmp_path / "policies", drain_grace=1)
    provider = AwsProviderSettings.model_validate(provider_setting(sim))
    settings = settings_for(sim, migrated_database_url, policies).model_copy(
        update={"provider": provider}
    )
    controller = Controller(settings, sources=[])
    controller.start(serve_web=False)
    handle = Engine(sim, controller)
    yield handle
    handle.close()


def aws_fault(sim: SimHandle, fault: dict[str, object]) -> None:
    response = httpx.post(f"{sim.aws_url}/_sim/faults", json=fault, timeout=10)
    assert response.status_code == 200, response.text


def finished(engine: Engine, outcome: str) -> float:
    labels = {"outcome": outcome, "policy": POLICY}
    found = engine.controller.registry.get_sample_value(
        "remediator_remediations_finished_total", labels
    )
    return found or 0.0


def test_a_failure_the_group_healed_counts_once_as_succeeded(engine: Engine) -> None:
    aws_fault(engine.sim, {"type": "insufficient_capacity", "count": 1000, "retry_seconds": 0.5})
    engine.push(xid(NODE))
    failed = engine.wait_state(NODE, State.FAILED, State.SUCCEEDED, timeout=90)
    assert failed.state is State.FAILED and "InsufficientInstanceCapacity" in (failed.error or "")
    wait_for(lambda: engine.node(NODE) is None, what=f"{NODE} gone with its instance")

    # Not closed: a retry or the group may still fix it, so no outcome is counted yet.
    assert finished(engine, "failed") == 0
    # Nothing to retry on: refused with the reason, the remediation untouched.
    with pytest.raises(commands.CommandRefused, match=f"{NODE} has left the cluster"):
        commands.run(
            engine.repository,
            "retry",
            failed.id,
            actor="on-call",
            node_known=engine.controller.nodes.knows,
        )
    still = engine.of_node(NODE)
    assert still is not None and still.state is State.FAILED and still.version == failed.version

    aws_fault(engine.sim, {"type": "insufficient_capacity", "count": 0})
    healed = engine.wait_state(NODE, State.SUCCEEDED, timeout=90)
    assert healed.outcome == "replaced" and healed.new_node
    wait_for(lambda: finished(engine, "succeeded") == 1, what="the success counted")
    assert finished(engine, "failed") == 0
    resolved = engine.controller.registry.get_sample_value(
        "remediator_remediations_resolved_total", {"outcome": "replaced", "policy": POLICY}
    )
    assert resolved == 1
