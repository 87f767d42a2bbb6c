"""The simulated cluster's nodes as EC2 instances of real Auto Scaling groups, served by moto.

At start every pool becomes an Auto Scaling group (desired = the pool's node count, max = desired
plus the spare capacity) and each seeded Node takes one of its instances: `spec.providerID`
`aws:///ZONE/i-…` and the instance's zone label. From then on a reconciler follows the groups the
way the cloud-node-lifecycle controller and a kubelet would: an instance the group launched
registers as a Node named by its private DNS name (Ready after the provision delay), and a Node
whose instance left its group is removed.

moto is the real AWS query protocol over HTTP; it runs in this process (`ThreadedMotoServer`) and
the controller reaches it through the fault proxy in `proxy.py`.

moto launches a group's replacement inside the terminate call and keeps no scaling activities.
The fleet adds what AWS shows around a launch: each new instance gets a Successful
`Launching a new EC2 instance: i-…` activity, and while an insufficient-capacity fault lasts a
terminated instance's replacement is withheld (the group stays one below its desired capacity)
and every launch attempt — one per `retry_seconds`, as the group retries on AWS — is a Failed
activity carrying `InsufficientInstanceCapacity`; once the fault is spent the next attempt
launches, so a withheld launch ends as exactly one instance.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from moto.backends import get_backend
from moto.core import DEFAULT_ACCOUNT_ID

from remediator.sim.cloud.aws.activities import (
    ActivityLog,
    capacity_message,
    failed_launch,
    launched,
)
from remediator.sim.cloud.nodepool import DEFAULT_SPARE_CAPACITY, pool_template
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import SimCluster

log = logging.getLogger(__name__)

REGION = "us-east-1"
ZONES = (f"{REGION}a", f"{REGION}b", f"{REGION}c")
AMI = "ami-12c6146b"  # one of the AMIs moto ships
INSTANCE_TYPE = "p5.48xlarge"
TEST_KEYS = {"access_key_id": "testing", "secret_access_key": "testing"}
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
NEVER = 10.0**9


def aws_clients(url: str) -> tuple[Any, Any]:
    session = boto3.session.Session(
        aws_access_key_id=TEST_KEYS["access_key_id"],
        aws_secret_access_key=TEST_KEYS["secret_access_key"],
        region_name=REGION,
    )
    config = Config(retries={"max_attempts": 3, "mode": "standard"})
    return (
        session.client("autoscaling", endpoint_url=url, config=config),
        session.client("ec2", endpoint_url=url, config=config),
    )


@dataclass
class AwsFaults:
    """Launches that register a Node which never turns Ready; launch attempts that fail for want
    of capacity, one per `retry_seconds`."""

    never_ready: int = 0
    insufficient_capacity: int = 0
    retry_seconds: float = 2.0


@dataclass
class SimAwsFleet:
    cluster: SimCluster
    moto_url: str
    provision_delay: float
    spare: int = DEFAULT_SPARE_CAPACITY
    faults: AwsFaults = field(default_factory=AwsFaults)
    activities: ActivityLog = field(default_factory=ActivityLog)
    _nodes: dict[str, str] = field(default_factory=dict)  # instance id → node name
    _groups: dict[str, str] = field(default_factory=dict)  # group → pool
    _templates: dict[str, tuple[dict[str, str], int]] = field(default_factory=dict)
    _next_attempt: dict[str, float] = field(default_factory=dict)  # group → monotonic time
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        self._asg, self._ec2 = aws_clients(self.moto_url)

    # -- start -------------------------------------------------------------------------------

    def bootstrap(self) -> None:
        """One group per pool, its instances wearing the seeded Nodes."""
        store = self.cluster.store
        for pool, names in self.cluster.pools().items():
            nodes = [n for n in (store.find("nodes", "", name) for name in names) if n]
            template = pool_template(nodes)
            self._templates[pool] = (template.labels, template.gpus)
            self._ec2.create_launch_template(
                LaunchTemplateName=pool,
                LaunchTemplateData={"ImageId": AMI, "InstanceType": INSTANCE_TYPE},
            )
            self._asg.create_auto_scaling_group(
                AutoScalingGroupName=pool,
                LaunchTemplate={"LaunchTemplateName": pool, "Version": "$Latest"},
                MinSize=0,
                MaxSize=len(names) + self.spare,
                DesiredCapacity=len(names),
                AvailabilityZones=list(ZONES),
            )
            self._groups[pool] = pool
            instances = sorted(self._members(pool), key=lambda i: str(i["InstanceId"]))
            for name, instance in zip(names, instances, strict=True):
                self._wear(name, str(instance["InstanceId"]), str(instance["AvailabilityZone"]))

    def _wear(self, node: str, instance: str, zone: str) -> None:
        def change(obj: Obj) -> None:
            obj["spec"]["providerID"] = f"aws:///{zone}/{instance}"
            labels = obj["metadata"].setdefault("labels", {})
            for key in ZONE_LABELS:
                labels[key] = zone
            labels["topology.kubernetes.io/region"] = REGION

        self.cluster.store.mutate("nodes", "", node, change)
        with self._lock:
            self._nodes[instance] = node

    def start(self, interval: float = 0.2) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(interval,), daemon=True, name="sim-aws"
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.reconcile()
            except Exception:  # the simulator keeps serving; the next pass tries again
                log.exception("sim aws: reconcile failed")

    # -- following the groups ----------------------------------------------------------------

    def _describe(self, group: str) -> dict[str, Any] | None:
        found = self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        groups = found["AutoScalingGroups"]
        return dict(groups[0]) if groups else None

    def _members(self, group: str) -> list[dict[str, Any]]:
        described = self._describe(group)
        return list(described["Instances"]) if described else []

    def reconcile(self) -> None:
        """Launched instances join as Nodes; Nodes of instances gone from their group leave;
        a group below its desired capacity (a withheld launch) tries to launch again."""
        current: dict[str, tuple[str, str]] = {}
        sizes: dict[str, int] = {}
        for group, pool in self._groups.items():
            described = self._describe(group)
            if described is None:
                continue
            active = [
                inst
                for inst in described["Instances"]
                if str(inst["LifecycleState"]) in ("InService", "Pending")
            ]
            sizes[pool] = len(active)
            for inst in active:
                current[str(inst["InstanceId"])] = (pool, str(inst["AvailabilityZone"]))
            if len(active) < int(described["DesiredCapacity"]):
                self._attempt_launch(group, int(described["DesiredCapacity"]), len(active))
        with self._lock:
            known = dict(self._nodes)
        for instance, node in known.items():
            if instance not in current:
                self.cluster.remove_node(node)
                with self._lock:
                    self._nodes.pop(instance, None)
        for instance, (pool, zone) in current.items():
            if instance not in known:
                self._launch(instance, pool, zone, sizes[pool])

    def _launch(self, instance: str, pool: str, zone: str, members: int) -> None:
        described = self._ec2.describe_instances(InstanceIds=[instance])["Reservations"]
        name = str(described[0]["Instances"][0]["PrivateDnsName"])
        started = described[0]["Instances"][0]["LaunchTime"]
        self.activities.add(launched(pool, instance, zone, started, members - 1))
        labels, gpus = self._templates[pool]
        delay = self.provision_delay
        with self._lock:
            if self.faults.never_ready > 0:
                self.faults.never_ready -= 1
                delay = NEVER
        self.cluster.add_node(name, pool, gpus, labels=dict(labels), ready_after=delay)
        self._wear(name, instance, zone)
        log.info("sim aws: instance %s of %s registered as node %s", instance, pool, name)

    def node_of(self, instance: str) -> str | None:
        """The Node an instance registered as, if it did."""
        with self._lock:
            return self._nodes.get(instance)

    def instance_of(self, node: str) -> str | None:
        """The instance a Node runs on now (the latest one to register under its name)."""
        with self._lock:
            found = [i for i, n in self._nodes.items() if n == node]
        return found[-1] if found else None

    # -- faults ------------------------------------------------------------------------------

    def set_spare(self, pool: str, spare: int) -> None:
        """Spare capacity as AWS counts it: MaxSize - DesiredCapacity."""
        found = self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool])
        groups = found["AutoScalingGroups"]
        if not groups:
            raise KeyError(pool)
        desired = int(groups[0]["DesiredCapacity"])
        self._asg.update_auto_scaling_group(AutoScalingGroupName=pool, MaxSize=desired + spare)

    def _attempt_launch(self, group: str, desired: int, active: int) -> None:
        """One launch attempt of a group short of its desired capacity: failed while the
        capacity fault lasts, else moto launches the missing instances."""
        now = time.monotonic()
        with self._lock:
            if now < self._next_attempt.get(group, 0.0):
                return
            self._next_attempt[group] = now + self.faults.retry_seconds
            short = self.faults.insufficient_capacity > 0
            if short:
                self.faults.insufficient_capacity -= 1
        if short:
            zone = ZONES[0]
            message = capacity_message(INSTANCE_TYPE, zone, list(ZONES[1:]))
            self.activities.add(failed_launch(group, zone, datetime.now(UTC), active, message))
            log.info("sim aws: launch in %s failed: InsufficientInstanceCapacity", group)
            return
        self._asg.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=desired)

    def group_short_of_capacity(self, instance: str) -> str | None:
        """The group of `instance` when a capacity fault is armed, else None."""
        if self.faults.insufficient_capacity <= 0:
            return None
        found = self._asg.describe_auto_scaling_instances(InstanceIds=[instance])
        members = found["AutoScalingInstances"]
        return str(members[0]["AutoScalingGroupName"]) if members else None

    @contextmanager
    def launch_withheld(self, group: str) -> Iterator[None]:
        """Around a TerminateInstanceInAutoScalingGroup that keeps the desired capacity while
        capacity is short: the group is one lower during the call, so moto launches nothing,
        and its desired capacity is restored after, leaving the launch owed to the retries.
        (moto honours no suspended Launch process, hence its group object directly.)"""
        moto_group = get_backend("autoscaling")[DEFAULT_ACCOUNT_ID][REGION].autoscaling_groups[
            group
        ]
        desired = int(moto_group.desired_capacity or 0)
        moto_group.desired_capacity = desired - 1
        try:
            yield
        finally:
            moto_group.desired_capacity = desired
            with self._lock:
                self._next_attempt[group] = time.monotonic()  # the group tries at once
