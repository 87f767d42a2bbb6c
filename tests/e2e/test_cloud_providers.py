"""Each real node-lifecycle provider end to end: the real CLI (`remediator sim serve --cloud X`,
`remediator run`), the provider's real client library on the wire, a GPU-off-the-bus node taken
to a finished remediation with exactly one new machine — and the provider's faults, each ending
in its documented state.

AWS: moto serves EC2 and Auto Scaling; the simulator's nodes are the groups' instances and the
group's launches join the cluster as new Nodes. Cluster API: the simulated API server serves the
Machine CRDs and runs a MachineSet controller. GCE: the simulator serves the Compute Engine REST
subset the official client calls."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from remediator.model.states import State
from remediator.store.db import make_engine, make_session_factory
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import Repository
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import ControllerProcess, write_process_config

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(300)]

CONDITION = "GpuFallenOffBus"  # XID 79 as node-problem-detector reports it


def ec2_of(sim: SimHandle) -> Any:
    keys = sim.provider["test_credentials"]
    return boto3.client(
        "ec2",
        endpoint_url=sim.provider["endpoint_url"],
        region_name=sim.provider["region"],
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )


def instance_count(sim: SimHandle) -> int:
    """Every instance EC2 ever launched here, terminated ones included."""
    pages = ec2_of(sim).get_paginator("describe_instances").paginate()
    return sum(len(r["Instances"]) for page in pages for r in page["Reservations"])


class Remediations:
    def __init__(self, database_url: str) -> None:
        self._engine = make_engine(database_url)
        self.repository = Repository(make_session_factory(self._engine), "default")

    def of(self, node: str) -> RemediationRecord | None:
        rows = self.repository.list(RemediationFilter(), limit=100).rows
        found = [r for r in (self.repository.get(row.id) for row in rows) if r and r.node == node]
        return found[0] if found else None

    def wait(
        self,
        node: str,
        done: Callable[[RemediationRecord], bool],
        controller: ControllerProcess,
        timeout: float = 120.0,
    ) -> RemediationRecord:
        deadline = time.monotonic() + timeout
        while True:
            record = self.of(node)
            if record is not None and done(record):
                return record
            if time.monotonic() > deadline:
                seen = record and (record.state.value, record.error, record.hold_reason)
                raise AssertionError(f"{node}: {seen}\n{controller.log_tail()}")
            time.sleep(0.3)

    def close(self) -> None:
        self._engine.dispose()


@pytest.fixture
def remediations(migrated_database_url: str) -> Iterator[Remediations]:
    found = Remediations(migrated_database_url)
    yield found
    found.close()


def break_node(sim: SimHandle, node: str) -> None:
    fault = {"type": "condition", "node": node, "condition": CONDITION, "status": "True"}
    assert httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10).status_code == 200


def aws_fault(sim: SimHandle, fault: dict[str, Any]) -> None:
    response = httpx.post(f"{sim.aws_url}/_sim/faults", json=fault, timeout=10)
    assert response.status_code == 200, response.text


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.2)


def group_filled(sim: SimHandle, group: str) -> bool:
    """The group holds its desired capacity in service: it owes no launch."""
    keys = sim.provider["test_credentials"]
    asg = boto3.client(
        "autoscaling",
        endpoint_url=sim.provider["endpoint_url"],
        region_name=sim.provider["region"],
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )
    found = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    live = [i for i in found["Instances"] if i["LifecycleState"] in ("InService", "Pending")]
    return len(live) == int(found["DesiredCapacity"])


def with_provider(config: Path, **changes: Any) -> Path:
    data = json.loads(config.read_text())
    data["provider"].update(changes)
    config.write_text(json.dumps(data))
    return config


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_aws_replaces_an_off_the_bus_node_with_one_new_instance_and_survives_its_faults(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    remediations: Remediations,
    tmp_path: Path,
) -> None:
    sim = sim_factory(nodes=5, provision_delay=0.5, cloud="aws")
    assert sim.provider["type"] == "aws"
    nodes = sim.kubectl("get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}").split()
    assert nodes and all(n.startswith("aws:///us-east-1") for n in nodes)
    before = instance_count(sim)
    config = with_provider(
        write_process_config(tmp_path, sim, migrated_database_url), launch_timeout_seconds=8
    )
    controller = ControllerProcess(tmp_path, config, "controller").wait_ready()
    try:
        # Throttled three times in a row (all of botocore's attempts): retried later, one launch.
        aws_fault(
            sim, {"type": "throttle", "count": 3, "action": "TerminateInstanceInAutoScalingGroup"}
        )
        break_node(sim, "h100-train-0000")
        done = remediations.wait(
            "h100-train-0000", lambda r: r.state is State.SUCCEEDED, controller
        )
        assert done.new_node and done.new_node.startswith("ip-")
        assert instance_count(sim) == before + 1
        details = [e.detail for e in done.events if "new_instance" in e.detail]
        assert details and details[-1]["auto_scaling_group"] == "h100-train"
        retried = [e.detail for e in done.events if e.action == "retrying"]
        assert any("Throttling" in str(d) for d in retried), [e.action for e in done.events]
        names = sim.kubectl("get", "nodes", "-o", "name").split()
        assert "node/h100-train-0000" not in names and f"node/{done.new_node}" in names

        # A launch whose node never turns Ready: failed with the reason, still one launch.
        aws_fault(sim, {"type": "never_ready", "count": 1})
        break_node(sim, "h100-train-0001")
        failed = remediations.wait("h100-train-0001", lambda r: r.state is State.FAILED, controller)
        assert "not Ready within" in (failed.error or ""), failed.error
        assert instance_count(sim) == before + 2

        # No capacity for the launch: AWS's Failed activity fails it with the reason, nothing
        # launched; once capacity returns the group launches exactly one instance, not two.
        aws_fault(sim, {"type": "insufficient_capacity", "count": 1000, "retry_seconds": 0.5})
        break_node(sim, "h100-train-0002")
        short = remediations.wait("h100-train-0002", lambda r: r.state is State.FAILED, controller)
        assert "InsufficientInstanceCapacity" in (short.error or ""), short.error
        assert any("launch_activity" in e.detail for e in short.events)
        assert instance_count(sim) == before + 2
        aws_fault(sim, {"type": "insufficient_capacity", "count": 0})
        wait_until(lambda: group_filled(sim, "h100-train"), "h100-train back at its size")
        assert instance_count(sim) == before + 3

        # No spare capacity (MaxSize = DesiredCapacity): held before anything is drained.
        aws_fault(sim, {"type": "spare_capacity", "pool": "a100-infer", "spare": 0})
        break_node(sim, "a100-infer-0000")
        held = remediations.wait("a100-infer-0000", lambda r: r.state is State.HELD, controller)
        assert "no spare capacity" in (held.hold_reason or ""), held.hold_reason
        assert instance_count(sim) == before + 3
    finally:
        controller.stop()


# -- Cluster API -----------------------------------------------------------------------------


def machines(sim: SimHandle) -> list[dict[str, Any]]:
    listing = json.loads(sim.kubectl("get", "machines", "-A", "-o", "json"))
    return list(listing["items"])


def kube_fault(sim: SimHandle, fault: dict[str, Any]) -> None:
    response = httpx.post(f"{sim.inject_url}/v1/kube-faults", json=fault, timeout=10)
    assert response.status_code == 200, response.text


def kube_requests(sim: SimHandle) -> list[dict[str, Any]]:
    response = httpx.get(f"{sim.inject_url}/v1/kube-requests", timeout=10)
    return list(response.json()["requests"])


def machine_names(sim: SimHandle) -> set[str]:
    return {m["metadata"]["name"] for m in machines(sim)}


def queue_launch_fault(sim: SimHandle, pool: str, fault: str) -> None:
    """The simulator's next new Machine of this pool's MachineDeployment takes the fault."""
    sim.kubectl(
        "annotate", "machinedeployment", "-n", "default", pool,
        f"sim.remediator.io/launch-faults={fault}",
    )  # fmt: skip


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_clusterapi_replaces_the_machine_and_survives_its_faults(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    remediations: Remediations,
    tmp_path: Path,
) -> None:
    sim = sim_factory(nodes=7, provision_delay=0.5, cloud="clusterapi")  # h100-train-0000…0004
    assert sim.provider == {"type": "clusterapi", "reboot_annotation": "reboot.sim.x-k8s.io"}
    before = {m["metadata"]["name"] for m in machines(sim)}
    # A paused Machine: Cluster API would not replace it, so the replacement waits, holding.
    sim.kubectl(
        "annotate", "machine", "-n", "default", "h100-train-0001", "cluster.x-k8s.io/paused="
    )
    config = with_provider(
        write_process_config(tmp_path, sim, migrated_database_url), launch_timeout_seconds=10
    )
    controller = ControllerProcess(tmp_path, config, "controller").wait_ready()
    try:
        # Throttled: the API server answers 429 with Retry-After to the Machine's patch once and
        # to its delete twice; retried after the wait, one Machine deleted, one created.
        for verb, count in (("patch", 1), ("delete", 2)):
            kube_fault(
                sim,
                {
                    "type": "error",
                    "status": 429,
                    "retry_after": 1,
                    "verbs": [verb],
                    "resources": ["machines"],
                    "count": count,
                },
            )
        break_node(sim, "h100-train-0000")
        done = remediations.wait(
            "h100-train-0000", lambda r: r.state is State.SUCCEEDED, controller
        )
        after = machine_names(sim)
        assert before - after == {"h100-train-0000"}
        assert after - before == {done.new_node}  # exactly one new Machine, and it is the node
        details = [e.detail for e in done.events if "new_machine" in e.detail]
        assert details and details[-1]["old_machine"] == "h100-train-0000"
        throttled = [
            (r["verb"], r["status"])
            for r in kube_requests(sim)
            if r["resource"] == "machines" and r.get("injected")
        ]
        assert sorted(throttled) == [("delete", 429), ("delete", 429), ("patch", 429)]

        break_node(sim, "h100-train-0001")
        remediations.wait(
            "h100-train-0001",
            lambda r: r.state is State.REPLACING and "paused" in (r.hold_reason or ""),
            controller,
        )
        assert machine_names(sim) == after

        # The infrastructure has no capacity: the new Machine fails as Cluster API reports it;
        # failed with its reason, and the MachineSet does not create a second one.
        queue_launch_fault(sim, "h100-train", "insufficient_capacity")
        break_node(sim, "h100-train-0002")
        short = remediations.wait("h100-train-0002", lambda r: r.state is State.FAILED, controller)
        assert "InsufficientResources" in (short.error or ""), short.error
        assert "InsufficientInstanceCapacity" in (short.error or ""), short.error
        now = machine_names(sim)
        assert after - now == {"h100-train-0002"} and len(now - after) == 1
        failed = json.loads(
            sim.kubectl("get", "machine", "-n", "default", *(now - after), "-o", "json")
        )
        assert failed["status"]["phase"] == "Failed"

        # The new Machine's Node never turns Ready: failed at the launch timeout, one Machine.
        queue_launch_fault(sim, "h100-train", "never_ready")
        break_node(sim, "h100-train-0003")
        stuck = remediations.wait("h100-train-0003", lambda r: r.state is State.FAILED, controller)
        assert "launch_timeout" in (stuck.error or "") and "not Ready" in (stuck.error or "")
        last = machine_names(sim)
        assert now - last == {"h100-train-0003"} and len(last - now) == 1
    finally:
        controller.stop()


# -- Compute Engine --------------------------------------------------------------------------


def gce_fault(sim: SimHandle, fault: dict[str, Any]) -> None:
    response = httpx.post(f"{sim.gce_url}/_sim/faults", json=fault, timeout=10)
    assert response.status_code == 200, response.text


def node_uid(sim: SimHandle, name: str) -> str:
    return sim.kubectl("get", "node", name, "-o", "jsonpath={.metadata.uid}")


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_gce_recreates_the_instance_once_and_survives_its_faults(
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    remediations: Remediations,
    tmp_path: Path,
) -> None:
    sim = sim_factory(nodes=5, provision_delay=0.5, cloud="gce")
    assert sim.provider["type"] == "gce" and sim.provider["anonymous"] is True
    names = sim.kubectl("get", "nodes", "-o", "name").split()
    old_uid = node_uid(sim, "h100-train-0000")
    config = with_provider(
        write_process_config(tmp_path, sim, migrated_database_url), launch_timeout_seconds=8
    )
    controller = ControllerProcess(tmp_path, config, "controller").wait_ready()
    try:
        # Throttled (429 rateLimitExceeded): retried later; the requestId keeps it one recreate.
        gce_fault(sim, {"type": "throttle", "count": 2})
        break_node(sim, "h100-train-0000")
        done = remediations.wait(
            "h100-train-0000", lambda r: r.state is State.SUCCEEDED, controller
        )
        assert done.new_node == "h100-train-0000"  # recreated under its own name
        assert node_uid(sim, "h100-train-0000") != old_uid
        assert sim.kubectl("get", "nodes", "-o", "name").split() == names
        details = [e.detail for e in done.events if "operation" in e.detail]
        assert details and details[-1]["instance_group"].endswith("/h100-train")
        retried = [e.detail for e in done.events if e.action == "retrying"]
        assert any("429" in str(d) for d in retried), [e.action for e in done.events]

        # The zone has no capacity: failed with GCE's code, nothing else recreated.
        gce_fault(sim, {"type": "capacity", "count": 1})
        break_node(sim, "h100-train-0001")
        failed = remediations.wait("h100-train-0001", lambda r: r.state is State.FAILED, controller)
        assert "ZONE_RESOURCE_POOL_EXHAUSTED" in (failed.error or ""), failed.error

        # The new VM's node never turns Ready: failed at the launch timeout with the reason.
        gce_fault(sim, {"type": "never_ready", "count": 1})
        break_node(sim, "a100-infer-0000")
        stuck = remediations.wait("a100-infer-0000", lambda r: r.state is State.FAILED, controller)
        assert "launch_timeout" in (stuck.error or ""), stuck.error
    finally:
        controller.stop()
