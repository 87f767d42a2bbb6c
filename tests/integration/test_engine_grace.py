"""One grace, in the seed's order (issue 9, problem 7): notify → quarantine → grace, in which every
workload gets its notice at the start. A pod that does not speak the checkpoint handshake gets
its SIGTERM (eviction with its own grace) at once instead of after the checkpoint wait, and a pod
that does is evicted as soon as it answers with what is left of the same clock, never a second
full grace."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediator.actions.checkpoint import ANN_HANDSHAKE
from remediator.model.states import State
from remediator.store.records import RemediationRecord
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import SETTINGS, Engine, start_engine, xid

pytestmark = pytest.mark.integration

# The shipped XID 79 ladder's shape: a two-minute grace, the pod's own grace inside it.
POLICY = """
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: A GPU off the bus is dead to every job on the node.
    match:
      kind: xid
      codes: [79]
    priority: 100
    actions:
      - action: notify
      - action: cordon
      - action: checkpoint
        grace: 2m
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: replace
"""
MAX_GRACE = 120
INFER_NODE = "a100-infer-0000"
TRAIN_NODE = "h100-train-0000"


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=8, provision_delay=1.0)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "xid.yaml").write_text(POLICY)
    (policies / "settings.yaml").write_text(
        SETTINGS.format(pool_percent=50, cluster_percent=50, max_concurrent=10, max_new_faults=20)
    )
    handle = start_engine(sim, migrated_database_url, policies)
    yield handle
    handle.close()


def _grace_step(record: RemediationRecord) -> dict[str, Any]:
    done = [e for e in record.events if e.from_state is State.CHECKPOINTING]
    assert done, [(e.action, e.to_state) for e in record.events]
    return dict(done[0].detail)


def _grace_periods(engine: Engine, namespace: str) -> dict[str, int]:
    """Pod name → the grace period its kubelet's SIGTERM carried (the sim's Killing Events)."""
    lines = engine.sim.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        "reason=Killing",
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.name}|{.message}{'\\n'}{end}",
    )
    found: dict[str, int] = {}
    for line in lines.splitlines():
        name, _, message = line.partition("|")
        if "sending SIGTERM" in message:
            found[name] = int(message.split("grace period ")[1].split("s")[0])
    return found


def test_pods_without_the_handshake_get_sigterm_at_the_start_with_their_own_grace(
    engine: Engine,
) -> None:
    pods = engine.pods_on(INFER_NODE)
    inference = {
        p["metadata"]["name"]: p for p in pods if p["metadata"]["namespace"] == "inference"
    }
    assert inference and not any(
        ANN_HANDSHAKE in (p["metadata"].get("annotations") or {}) for p in inference.values()
    )
    engine.push(xid(INFER_NODE))
    # Before: nobody answers the checkpoint request, so the step waited the whole 2 minutes and
    # only then did the drain send SIGTERM with another grace. Now the step is over at once.
    record = engine.wait_state(
        INFER_NODE, State.DRAINING, State.REPLACING, State.VERIFYING, State.SUCCEEDED, timeout=60
    )
    grace = _grace_step(record)
    assert grace["asked"] == [] and grace["answered"] == []
    noticed = {row["pod"].split("/")[1]: row for row in grace["pods"]}
    assert set(noticed) == set(inference), noticed
    # The first of each budget's pods is evicted with its own 30 s grace (inside 30 s..2 m);
    # the rest wait for the budget and then get what is left of the same clock.
    evicted = [row for row in noticed.values() if row["state"] == "evicted"]
    assert evicted and all(row["grace_seconds"] == 30 for row in evicted), noticed
    done = engine.wait_state(INFER_NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=90)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    periods = _grace_periods(engine, "inference")
    assert set(inference) <= set(periods), periods
    assert all(periods[name] <= 30 for name in inference), periods


def test_a_pod_with_the_handshake_is_asked_then_evicted_with_the_rest_of_its_clock(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="remediator.transitions")
    trainers = [p for p in engine.pods_on(TRAIN_NODE) if p["metadata"]["namespace"] == "training"]
    assert trainers and all(
        (p["metadata"].get("annotations") or {}).get(ANN_HANDSHAKE) == "true" for p in trainers
    )
    engine.push(xid(TRAIN_NODE))
    record = engine.wait_state(
        TRAIN_NODE, State.DRAINING, State.REPLACING, State.VERIFYING, State.SUCCEEDED, timeout=60
    )
    grace = _grace_step(record)
    keys = sorted(f"training/{p['metadata']['name']}" for p in trainers)
    assert grace["answered"] == keys
    rows = {row["pod"]: row for row in grace["pods"]}
    # Asked at the start, answered after its checkpoint, then SIGTERM with what was left of the
    # two minutes: the total never exceeds one grace.
    for key in keys:
        assert rows[key]["state"] == "evicted"
        assert rows[key]["grace_seconds"] < MAX_GRACE
    done = engine.wait_state(TRAIN_NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=90)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    periods = _grace_periods(engine, "training")  # the kubelet's SIGTERM, once the pod is gone
    assert all(periods[key.split("/")[1]] < MAX_GRACE for key in keys), periods

    # Every transition after the opening is one structured log line.
    lines = [
        r
        for r in caplog.records
        if r.name == "remediator.transitions" and getattr(r, "node", None) == TRAIN_NODE
    ]
    assert [(r.from_state, r.to_state) for r in lines] == [  # type: ignore[attr-defined]
        ("detected", "quarantined"),
        ("quarantined", "checkpointing"),
        ("checkpointing", "draining"),
        ("draining", "replacing"),
        ("replacing", "verifying"),
        ("verifying", "succeeded"),
    ]
    for line in lines:
        assert line.remediation_id == done.id and line.reason  # type: ignore[attr-defined]
        assert line.seconds_in_state >= 0  # type: ignore[attr-defined]
