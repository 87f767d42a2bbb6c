"""Done-when of #27's planned maintenance through the real CLI: `remediator run` as a subprocess
with the shipped policies/maintenance.yaml (its ladders as users get them; only the clocks are
shortened for a test: the checkpoint's grace, the step timeouts and the deadline's margin) on the
simulator's clouds, the events injected on the cloud's side and read by the controller's own
maintenance sources.

- an EC2 `system-reboot` on a node whose training job announces its next checkpoint waits,
  uncordoned, for the checkpoint, then is drained, rebooted through RebootInstances, validated
  and uncordoned long before `notBefore`;
- a Compute Engine announcement with `canReschedule` is started early with performMaintenance
  inside the pool's maintenance window, and Compute Engine ran it;
- an EC2 `instance-retirement` ends in a replacement ahead of its deadline.

None of them counts toward the storm breaker (set to trip on a single fault).

Each on one database, both covered across the file: test_engine_planned runs the same three
decisions on both, so running each CLI case on both added ~2 minutes and no new proof.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml

from remediator.model.states import State
from remediator.policy.planned import ANN_NEXT_CHECKPOINT
from remediator.store.records import RemediationRecord
from tests.fixtures.sim import FAST_PROGRAMS, SimHandle
from tests.integration.engine_support import ProcessRun

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(900)]

SHIPPED = Path(__file__).resolve().parents[2] / "policies" / "maintenance.yaml"
TRAIN_NODE = "h100-train-0000"
POOL = "h100-train"
# Far enough ahead that a loaded machine has the controller polling before it comes.
CHECKPOINT_IN = timedelta(seconds=45)
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 10
storm_breaker: {enabled: true, max_new_faults: 1, window: 5m}
planned: {max_concurrent: 2, per_pool: 1}
default_cooldown: 1h
"""
FINISHED = (State.SUCCEEDED, State.FAILED, State.HELD)


def shipped_with_test_clocks() -> str:
    """The shipped maintenance policies, steps and matches untouched; only the waits shortened
    (a 10-minute checkpoint grace and a 1-hour margin are for production jobs, not a test)."""
    data = yaml.safe_load(SHIPPED.read_text())
    for policy in data["policies"]:
        policy["when"]["before_deadline"] = "10m"
        for step in policy["actions"]:
            if step["action"] == "checkpoint":
                step.update({"min_grace": "1s", "max_grace": "5s"})
            elif step["action"] == "drain":
                step.update({"timeout": "1m", "on_timeout": "force"})
            elif step["action"] in ("reboot", "diagnose", "validate"):
                step["timeout"] = "3m"
    return yaml.safe_dump(data, sort_keys=False)


class Run(ProcessRun):
    def __init__(self, sim: SimHandle, workdir: Path, database_url: str, settings: str) -> None:
        # Only the shipped maintenance policies act.
        policies = {"maintenance.yaml": shipped_with_test_clocks(), "settings.yaml": settings}
        super().__init__(sim, workdir, database_url, policies=policies)
        self.http = httpx.Client(timeout=30.0)

    def close(self) -> None:
        super().close()
        self.http.close()

    def wait(self, node: str, *states: State, timeout: float = 180.0) -> RemediationRecord:
        return super().wait(node, *states, timeout=timeout)

    def assert_breaker_untouched(self) -> None:
        status = self.repository.controller_status()
        assert not status.breaker_tripped and tuple(status.breaker_faults) == ()


@pytest.fixture
def run_on(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Callable[..., Run]]:
    started: list[Run] = []

    def start(cloud: str, settings: str = SETTINGS) -> Run:
        sim = sim_factory(
            nodes=8,
            provision_delay=0.5,
            cloud=cloud,
            reboot_delay=1.0,
            program_time_scale=FAST_PROGRAMS,
        )
        running = Run(sim, tmp_path, migrated_database_url, settings)
        started.append(running)
        return running

    yield start
    for running in started:
        running.close()


def moves(record: RemediationRecord) -> list[State]:
    return [e.to_state for e in record.events if e.to_state is not None]


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_an_ec2_system_reboot_is_drained_at_the_checkpoint_rebooted_validated_and_returned(
    run_on: Callable[..., Run],
) -> None:
    run = run_on("aws")
    trainers = [p for p in run.pods_on(TRAIN_NODE) if p["metadata"]["namespace"] == "training"]
    assert trainers
    checkpoint = (datetime.now(UTC) + CHECKPOINT_IN).replace(microsecond=0)
    for pod in trainers:
        run.sim.kubectl(
            "annotate",
            "pod",
            "-n",
            "training",
            pod["metadata"]["name"],
            f"{ANN_NEXT_CHECKPOINT}={checkpoint.isoformat()}",
        )
    node = run.node(TRAIN_NODE)
    assert node is not None
    instance = node["spec"]["providerID"].rsplit("/", 1)[-1]
    boot_before = node["status"]["nodeInfo"]["bootID"]
    not_before = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    created = run.http.post(
        f"{run.sim.aws_url}/_sim/events",
        json={
            "node": TRAIN_NODE,
            "code": "system-reboot",
            "not_before": not_before.isoformat(),
            "not_after": (not_before + timedelta(hours=2)).isoformat(),
        },
    )
    assert created.status_code == 201, created.text

    # Found by the controller's own DescribeInstanceStatus poll; the node keeps working meanwhile.
    waiting = run.wait(TRAIN_NODE, State.QUEUED)
    assert waiting.queue_cause == "planned"
    current = run.node(TRAIN_NODE)
    assert current is not None and not current["spec"].get("unschedulable")

    done = run.wait(TRAIN_NODE, *FINISHED)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    plans = [e.detail for e in done.events if e.action == "planned"]
    assert plans and plans[0]["reason"] == "the job's checkpoint", plans
    assert plans[0]["deadline"] == not_before.isoformat()
    admitted = next(e for e in done.events if e.action == "admitted")
    assert admitted.at >= checkpoint  # drained at the job's checkpoint, not before
    accepted = next(e for e in done.events if e.action == "reboot_accepted")
    assert accepted.detail["via"] == "maintenance"
    assert accepted.detail["call"] == "ec2:RebootInstances"
    assert accepted.detail["event"] == "system-reboot"
    assert accepted.detail["instance"] == instance
    checks = [e.detail for e in done.events if e.action == "validation_check"]
    assert checks and all(c["passed"] for c in checks), checks
    assert moves(done)[-6:] == [
        State.DRAINING,
        State.REBOOTING,
        State.DIAGNOSING,
        State.VALIDATING,
        State.UNCORDONING,
        State.SUCCEEDED,
    ]
    assert done.finished_at is not None and done.finished_at < not_before

    # The cloud's side: the instance went through a reboot (the simulator reboots a Node only on
    # a RebootInstances EC2 accepted) and is back in service.
    after = run.node(TRAIN_NODE)
    assert after is not None and not after["spec"].get("unschedulable")
    assert after["status"]["nodeInfo"]["bootID"] != boot_before
    assert after["spec"]["providerID"].endswith(f"/{instance}")
    run.assert_breaker_untouched()


@pytest.mark.parametrize("migrated_database_url", ["postgresql"], indirect=True)
def test_a_gce_announcement_is_started_early_with_perform_maintenance_inside_the_window(
    run_on: Callable[..., Run],
) -> None:
    now = datetime.now(UTC)
    # A window open now (this hour's opening lasts two hours) for the node's pool only.
    window = (
        "windows:\n"
        f'  this-hour: {{start: "0 {now.hour} * * *", duration: 2h, timezone: UTC, '
        f"pools: [{POOL}]}}\n"
    )
    run = run_on("gce", SETTINGS + window)
    node = run.node(TRAIN_NODE)
    assert node is not None
    boot_before = node["status"]["nodeInfo"]["bootID"]
    window_start = (now + timedelta(days=1)).replace(microsecond=0)
    announced = run.http.post(
        f"{run.sim.gce_url}/_sim/maintenance",
        json={
            "instance": TRAIN_NODE,
            "window_start": window_start.isoformat(),
            "window_end": (window_start + timedelta(hours=4)).isoformat(),
            "can_reschedule": True,
        },
    )
    announced.raise_for_status()

    done = run.wait(TRAIN_NODE, *FINISHED)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    plans = [e.detail for e in done.events if e.action == "planned"]
    assert plans and plans[-1]["window"] == "this-hour", plans
    assert plans[-1]["window_start"] <= plans[-1]["moment"] < plans[-1]["window_end"]
    accepted = next(e for e in done.events if e.action == "reboot_accepted")
    assert accepted.detail["call"] == "compute.instances.performMaintenance"
    assert accepted.detail["event"] == "SCHEDULED"
    checks = [e.detail for e in done.events if e.action == "validation_check"]
    assert checks and all(c["passed"] for c in checks), checks
    assert moves(done)[-3:] == [State.VALIDATING, State.UNCORDONING, State.SUCCEEDED]
    assert done.finished_at is not None and done.finished_at < window_start

    # Compute Engine's side: one performMaintenance operation on the instance, which ran it.
    base = f"{run.sim.provider['api_endpoint']}/compute/v1/projects/{run.sim.provider['project']}"
    zone = f"{base}/zones/sim-central1-a"
    operations = run.http.get(f"{zone}/operations").json().get("items", [])
    performed = [o for o in operations if o["operationType"] == "performMaintenance"]
    assert [o["targetLink"].rsplit("/", 1)[-1] for o in performed] == [TRAIN_NODE]
    got = run.http.get(f"{zone}/instances/{TRAIN_NODE}").json()
    assert "upcomingMaintenance" not in got.get("resourceStatus", {})
    after = run.node(TRAIN_NODE)
    assert after is not None and not after["spec"].get("unschedulable")
    assert after["status"]["nodeInfo"]["bootID"] != boot_before
    run.assert_breaker_untouched()


@pytest.mark.parametrize("migrated_database_url", ["postgresql"], indirect=True)
def test_an_ec2_instance_retirement_ends_in_a_replacement_ahead_of_the_deadline(
    run_on: Callable[..., Run],
) -> None:
    run = run_on("aws")
    node = run.node(TRAIN_NODE)
    assert node is not None
    instance = node["spec"]["providerID"].rsplit("/", 1)[-1]
    not_before = (datetime.now(UTC) + timedelta(hours=6)).replace(microsecond=0)
    created = run.http.post(
        f"{run.sim.aws_url}/_sim/events",
        json={
            "instance_id": instance,
            "code": "instance-retirement",
            "not_before": not_before.isoformat(),
        },
    )
    assert created.status_code == 201, created.text

    done = run.wait(TRAIN_NODE, *FINISHED)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason
    assert done.outcome == "replaced" and done.new_node
    plans = [e.detail for e in done.events if e.action == "planned"]
    assert plans and plans[0]["reason"] == "no checkpoint announced in time: now", plans
    assert plans[0]["deadline"] == not_before.isoformat()
    assert State.REPLACING in moves(done)
    assert done.finished_at is not None and done.finished_at < not_before

    # The cloud's side: the retiring instance is gone, a new one serves in the pool.
    assert run.node(TRAIN_NODE) is None
    replacement = run.node(done.new_node)
    assert replacement is not None
    assert not replacement["spec"]["providerID"].endswith(f"/{instance}")
    run.assert_breaker_untouched()
