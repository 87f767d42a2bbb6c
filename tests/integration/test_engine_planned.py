"""A planned ladder through the real controller (in-process, its jobs running) on the simulated
AWS cloud: an EC2 system-reboot event on a node whose training job announces its checkpoints
waits, uncordoned, for the job's checkpoint; then the node is drained, rebooted through
RebootInstances, checked and returned, long before the event's notBefore, and the storm
breaker never counted it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.policy.planned import ANN_NEXT_CHECKPOINT
from remediator.settings import AwsProviderSettings
from remediator.signals.maintenance import MaintenanceEvent, MaintenanceOrigin
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, provider_setting, settings_for

pytestmark = pytest.mark.integration

TRAIN_NODE = "h100-train-0000"
CHECKPOINT_IN = timedelta(seconds=8)
POLICY = """
policies:
  - name: aws-reboot-event
    description: EC2 scheduled a reboot of this node's instance
    why: rebooted by us at the job's checkpoint, not by AWS under a running job
    match:
      kind: maintenance
      codes: [1, 2]
      labels: {source: aws}
    when: {before_deadline: 10m, at_checkpoint: true, window: pool}
    actions:
      - action: cordon
      - action: checkpoint
        min_grace: 1s
        max_grace: 5s
      - action: drain
        timeout: 1m
        on_timeout: force
      - action: reboot
        via: maintenance
        timeout: 2m
      - action: diagnose
        level: 1
        timeout: 2m
      - action: uncordon
"""
SETTINGS = """
storm_breaker: {enabled: true, max_new_faults: 1, window: 5m}
planned: {max_concurrent: 2, per_pool: 1}
"""


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Engine]:
    sim = sim_factory(nodes=8, provision_delay=0.5, cloud="aws", reboot_delay=1.0)
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "maintenance.yaml").write_text(POLICY)
    (policies / "settings.yaml").write_text(SETTINGS)
    settings = settings_for(sim, migrated_database_url, policies)
    provider = AwsProviderSettings(**provider_setting(sim))
    controller = Controller(settings.model_copy(update={"provider": provider}), sources=[])
    controller.start(serve_web=False)
    handle = Engine(sim, controller)
    yield handle
    handle.close()


def test_an_ec2_system_reboot_is_done_at_the_jobs_checkpoint_through_reboot_instances(
    engine: Engine,
) -> None:
    sim = engine.sim
    trainers = [p for p in engine.pods_on(TRAIN_NODE) if p["metadata"]["namespace"] == "training"]
    assert trainers
    checkpoint = (datetime.now(UTC) + CHECKPOINT_IN).replace(microsecond=0)
    for pod in trainers:
        sim.kubectl(
            "annotate",
            "pod",
            "-n",
            "training",
            pod["metadata"]["name"],
            f"{ANN_NEXT_CHECKPOINT}={checkpoint.isoformat()}",
        )
    node = engine.node(TRAIN_NODE)
    assert node is not None
    instance = node["spec"]["providerID"].rsplit("/", 1)[-1]
    boot_before = node["status"]["nodeInfo"]["bootID"]
    not_before = datetime.now(UTC) + timedelta(hours=2)
    event = MaintenanceEvent(
        event_id="instance-event-0123456789abcdef0",
        code="system-reboot",
        origin=MaintenanceOrigin.AWS,
        instance_id=instance,
        node=TRAIN_NODE,
        window_start=not_before,
        window_end=not_before + timedelta(hours=2),
        deadline=not_before + timedelta(days=7),
    )
    engine.push(event.signal("aws-events", datetime.now(UTC)))

    waiting = engine.wait_state(TRAIN_NODE, State.QUEUED, timeout=60)
    assert waiting.queue_cause == "planned"
    assert waiting.next_attempt_at == checkpoint
    (plan,) = [e.detail for e in waiting.events if e.action == "planned"]
    assert plan["reason"] == "the job's checkpoint" and plan["deadline"] == not_before.isoformat()
    current = engine.node(TRAIN_NODE)
    assert current is not None and not current["spec"].get("unschedulable")  # still working

    done = engine.wait_state(TRAIN_NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=180)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    admitted = next(e for e in done.events if e.action == "admitted")
    assert admitted.at >= checkpoint  # not before the job's checkpoint
    accepted = next(e for e in done.events if e.action == "reboot_accepted")
    assert accepted.detail["via"] == "maintenance"
    assert accepted.detail["call"] == "ec2:RebootInstances"
    assert accepted.detail["event"] == "system-reboot"
    assert accepted.detail["instance"] == instance
    moves = [e.to_state for e in done.events if e.to_state is not None]
    assert moves[-5:] == [
        State.DRAINING,
        State.REBOOTING,
        State.DIAGNOSING,
        State.UNCORDONING,
        State.SUCCEEDED,
    ]
    assert done.finished_at is not None and done.finished_at < not_before
    after = engine.node(TRAIN_NODE)
    assert after is not None and not after["spec"].get("unschedulable")
    assert after["status"]["nodeInfo"]["bootID"] != boot_before
    status = engine.repository.controller_status()
    assert not status.breaker_tripped and tuple(status.breaker_faults) == ()
