"""Planned ladders through the real controller (in-process, its jobs running) on the simulated
clouds: an EC2 system-reboot event on a node whose training job announces its checkpoints
waits, uncordoned, for the job's checkpoint; then the node is drained, rebooted through
RebootInstances, checked and returned, long before the event's notBefore, and the storm
breaker never counted it. A Compute Engine announcement with canReschedule is started early
with performMaintenance inside the pool's window; an EC2 instance-retirement ends in a
replacement ahead of its deadline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.policy.planned import ANN_CHECKPOINT_INTERVAL, ANN_NEXT_CHECKPOINT
from remediator.settings import AwsProviderSettings, GceProviderSettings
from remediator.signals.maintenance import MaintenanceEvent, MaintenanceOrigin
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, provider_setting, settings_for, wait_for

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
def engine_on(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Callable[..., Engine]]:
    started: list[Engine] = []

    def start(cloud: str, policy: str = POLICY, settings_yaml: str = SETTINGS) -> Engine:
        sim = sim_factory(nodes=8, provision_delay=0.5, cloud=cloud, reboot_delay=1.0)
        policies = tmp_path / "policies"
        policies.mkdir()
        (policies / "maintenance.yaml").write_text(policy)
        (policies / "settings.yaml").write_text(settings_yaml)
        settings = settings_for(sim, migrated_database_url, policies)
        kind = AwsProviderSettings if cloud == "aws" else GceProviderSettings
        provider = kind(**provider_setting(sim))
        controller = Controller(settings.model_copy(update={"provider": provider}), sources=[])
        controller.start(serve_web=False)
        handle = Engine(sim, controller)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.close()


@pytest.fixture
def engine(engine_on: Callable[..., Engine]) -> Engine:
    return engine_on("aws")


@pytest.mark.parametrize("interval", [None, "30m"])
def test_an_ec2_system_reboot_is_done_at_the_jobs_checkpoint_through_reboot_instances(
    engine: Engine, interval: str | None
) -> None:
    """With an announced interval too (each passed checkpoint has a next one), the plan starts
    at the checkpoint it chose, not at the next one (#39)."""
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
            *([f"{ANN_CHECKPOINT_INTERVAL}={interval}"] if interval else []),
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

    engine.wait_state(TRAIN_NODE, State.QUEUED, timeout=60)

    def planned() -> bool:
        # The plan's line follows the queued remediation's creation (its own write).
        record = engine.of_node(TRAIN_NODE)
        return record is not None and any(e.action == "planned" for e in record.events)

    wait_for(planned, timeout=60, what="the plan on the timeline")
    waiting = engine.of_node(TRAIN_NODE)
    assert waiting is not None and waiting.state is State.QUEUED
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
    moments = {e.detail["moment"] for e in done.events if e.action == "planned"}
    assert moments == {checkpoint.isoformat()}  # never rolled on to the next checkpoint
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


GCE_POLICY = """
policies:
  - name: gce-maintenance-early
    description: Compute Engine announced host maintenance that may be started early
    why: started by us right after the drain, inside the pool's window
    match:
      kind: maintenance
      labels: {source: gce, can_reschedule: "true"}
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


def test_a_gce_announcement_is_started_early_with_perform_maintenance_inside_the_window(
    engine_on: Callable[..., Engine],
) -> None:
    now = datetime.now(UTC)
    # A window open now (this hour's opening lasts two hours) for the node's pool only.
    window = (
        "windows:\n"
        f'  this-hour: {{start: "0 {now.hour} * * *", duration: 2h, timezone: UTC, '
        "pools: [h100-train]}\n"
    )
    engine = engine_on("gce", GCE_POLICY, SETTINGS + window)
    sim = engine.sim
    node = engine.node(TRAIN_NODE)
    assert node is not None
    boot_before = node["status"]["nodeInfo"]["bootID"]
    window_start = now + timedelta(days=1)
    announced = {
        "instance": TRAIN_NODE,
        "window_start": window_start.isoformat(),
        "window_end": (window_start + timedelta(hours=4)).isoformat(),
        "can_reschedule": True,
    }
    engine.http.post(f"{sim.gce_url}/_sim/maintenance", json=announced).raise_for_status()
    event = MaintenanceEvent(
        event_id=f"gce-{TRAIN_NODE}",
        code="SCHEDULED",
        origin=MaintenanceOrigin.GCE,
        instance_id=TRAIN_NODE,
        node=TRAIN_NODE,
        window_start=window_start,
        window_end=window_start + timedelta(hours=4),
        can_reschedule=True,
    )
    engine.push(event.signal("gce-maintenance", now))

    done = engine.wait_state(TRAIN_NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=180)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    (plan,) = [e.detail for e in done.events if e.action == "planned"]
    assert plan["window"] == "this-hour"
    assert plan["window_start"] <= plan["moment"] < plan["window_end"]
    accepted = next(e for e in done.events if e.action == "reboot_accepted")
    assert accepted.detail["call"] == "compute.instances.performMaintenance"
    assert accepted.detail["event"] == "SCHEDULED"
    assert done.finished_at is not None and done.finished_at < window_start
    after = engine.node(TRAIN_NODE)
    assert after is not None and not after["spec"].get("unschedulable")
    assert after["status"]["nodeInfo"]["bootID"] != boot_before
    # Compute Engine ran it: the announcement is gone from the instance.
    got = engine.http.get(
        f"{sim.provider['api_endpoint']}/compute/v1/projects/{sim.provider['project']}"
        f"/zones/sim-central1-a/instances/{TRAIN_NODE}"
    )
    assert "upcomingMaintenance" not in got.json().get("resourceStatus", {})


RETIREMENT_POLICY = """
policies:
  - name: aws-retirement
    description: EC2 will retire this node's instance
    why: a retiring host never comes back; replace it ahead of the deadline
    match:
      kind: maintenance
      codes: [4]
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
      - action: replace
"""


def test_an_instance_retirement_ends_in_a_replacement_ahead_of_the_deadline(
    engine_on: Callable[..., Engine],
) -> None:
    engine = engine_on("aws", RETIREMENT_POLICY)
    node = engine.node(TRAIN_NODE)
    assert node is not None
    instance = node["spec"]["providerID"].rsplit("/", 1)[-1]
    not_before = datetime.now(UTC) + timedelta(hours=6)
    event = MaintenanceEvent(
        event_id="instance-event-retire",
        code="instance-retirement",
        origin=MaintenanceOrigin.AWS,
        instance_id=instance,
        node=TRAIN_NODE,
        window_start=not_before,
        deadline=not_before + timedelta(days=3),
    )
    engine.push(event.signal("aws-events", datetime.now(UTC)))
    done = engine.wait_state(TRAIN_NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=180)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    assert done.outcome == "replaced" and done.new_node
    (plan,) = [e.detail for e in done.events if e.action == "planned"]
    assert plan["reason"] == "no checkpoint announced in time: now"
    assert done.finished_at is not None and done.finished_at < not_before
    status = engine.repository.controller_status()
    assert tuple(status.breaker_faults) == ()
