"""The simulated cluster's nodes as EC2 instances of real Auto Scaling groups, served by moto.

At start every pool becomes an Auto Scaling group (desired = the pool's node count, max = desired
plus the spare capacity) and each seeded Node takes one of its instances: `spec.providerID`
`aws:///ZONE/i-…` and the instance's zone label. From then on a reconciler follows the groups the
way the cloud-node-lifecycle controller and a kubelet would: an instance the group launched
registers as a Node named by its private DNS name (Ready after the provision delay), and a Node
whose instance left its group is removed.

moto is the real AWS query protocol over HTTP; it runs in this process (`ThreadedMotoServer`) and
the controller reaches it through the fault proxy in `proxy.py`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

from remediator.sim.cloud.nodepool import DEFAULT_SPARE_CAPACITY, pool_template
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.cluster import SimCluster

log = logging.getLogger(__name__)

REGION = "us-east-1"
ZONES = (f"{REGION}a", f"{REGION}b", f"{REGION}c")
AMI = "ami-12c6146b"  # one of the AMIs moto ships
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
    """Launches that register a Node which never turns Ready."""

    never_ready: int = 0


@dataclass
class SimAwsFleet:
    cluster: SimCluster
    moto_url: str
    provision_delay: float
    spare: int = DEFAULT_SPARE_CAPACITY
    faults: AwsFaults = field(default_factory=AwsFaults)
    _nodes: dict[str, str] = field(default_factory=dict)  # instance id → node name
    _groups: dict[str, str] = field(default_factory=dict)  # group → pool
    _templates: dict[str, tuple[dict[str, str], int]] = field(default_factory=dict)
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
                LaunchTemplateData={"ImageId": AMI, "InstanceType": "p5.48xlarge"},
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

    def _members(self, group: str) -> list[dict[str, Any]]:
        found = self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        groups = found["AutoScalingGroups"]
        return list(groups[0]["Instances"]) if groups else []

    def reconcile(self) -> None:
        """Launched instances join as Nodes; Nodes of instances gone from their group leave."""
        current: dict[str, tuple[str, str]] = {}
        for group, pool in self._groups.items():
            for inst in self._members(group):
                if str(inst["LifecycleState"]) in ("InService", "Pending"):
                    current[str(inst["InstanceId"])] = (pool, str(inst["AvailabilityZone"]))
        with self._lock:
            known = dict(self._nodes)
        for instance, node in known.items():
            if instance not in current:
                self.cluster.remove_node(node)
                with self._lock:
                    self._nodes.pop(instance, None)
        for instance, (pool, zone) in current.items():
            if instance not in known:
                self._launch(instance, pool, zone)

    def _launch(self, instance: str, pool: str, zone: str) -> None:
        described = self._ec2.describe_instances(InstanceIds=[instance])["Reservations"]
        name = str(described[0]["Instances"][0]["PrivateDnsName"])
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

    # -- faults ------------------------------------------------------------------------------

    def set_spare(self, pool: str, spare: int) -> None:
        """Spare capacity as AWS counts it: MaxSize - DesiredCapacity."""
        found = self._asg.describe_auto_scaling_groups(AutoScalingGroupNames=[pool])
        groups = found["AutoScalingGroups"]
        if not groups:
            raise KeyError(pool)
        desired = int(groups[0]["DesiredCapacity"])
        self._asg.update_auto_scaling_group(AutoScalingGroupName=pool, MaxSize=desired + spare)
