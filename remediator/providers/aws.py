"""EC2 Auto Scaling groups as node pools (EKS managed and self-managed node groups).

Replacement is `TerminateInstanceInAutoScalingGroup(ShouldDecrementDesiredCapacity=False)`: the
group launches a new instance to keep its desired capacity. Before terminating, the old instance is
tagged with our remediation key, its group and the request time, so that after a crash a repeated
request finds the same operation from EC2 alone. The instance's own state decides whether to call
terminate at all: an instance that is already terminating or gone is never terminated again, so
asking twice can never launch two.

The replacement instance is the first instance of the group launched at or after the request
(the group's scaling activities name it on AWS; instance launch times are the fallback where the
activity log is empty, as on moto). It is claimed with a `remediator.io/replaces` tag so that two
replacements in one group never take the same instance. The operation succeeds once that
instance's Node (matched by `spec.providerID`) is Ready.

Reboot is `RebootInstances` on the node's instance. EC2 takes no idempotency token for it, so the
key is tagged on the instance first and a repeated key finds it there and never asks again; a
call EC2 refused removes the tag so that a retry asks again. A crash (or a lost reply) between the
tag and the answer leaves it at most once: the step's boot-id wait then decides.

Planned maintenance (`trigger_maintenance`) is that same reboot, for the scheduled events a
user-initiated reboot answers: `instance-reboot` (done by it) and `system-reboot` (EC2 attempts
reboot migration to new hardware, which clears the event when it succeeds). Other events
(`instance-retirement`, `instance-stop`, `system-maintenance`) are not ours to start.

Operation ids are `<group>/<old instance id>`. Credentials come only from boto3's own chain.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from remediator.clock import utcnow
from remediator.errors import NotFoundError, PermanentError, RemediatorError, TransientError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.providers.base import (
    EC2_REBOOT_EVENTS,
    CapacityExhausted,
    MaintenanceUnsupported,
    Operation,
    OperationState,
    RebootReceipt,
)
from remediator.providers.replacement import Candidate, choose_replacement
from remediator.settings import AwsProviderSettings

KEY_TAG = "remediator.io/remediation-key"
GROUP_TAG = "remediator.io/auto-scaling-group"
REQUESTED_TAG = "remediator.io/requested-at"
PRESENT_TAG = "remediator.io/launched-same-second"
TAG_VALUE_MAX = 256
REPLACES_TAG = "remediator.io/replaces"
REBOOT_KEY_TAG = "remediator.io/reboot-key"
REBOOT_AT_TAG = "remediator.io/reboot-requested-at"

PROVIDER_ID = re.compile(r"^aws://[^/]*/(?P<zone>[^/]*)/(?P<instance>i-[0-9a-f]+)$")
LAUNCH_DESCRIPTION = re.compile(r"Launching a new EC2 instance: (?P<instance>i-[0-9a-f]+)")
THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "SlowDown",
    }
)
CAPACITY = frozenset(
    {"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity"}
)
GONE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
LEAVING_LIFECYCLE = ("Terminating", "Terminated", "Detaching", "Detached")


def parse_provider_id(provider_id: str) -> tuple[str, str]:
    """`aws:///us-east-1a/i-0abc…` → (zone, instance id); anything else is a PermanentError."""
    match = PROVIDER_ID.match(provider_id)
    if not match:
        raise PermanentError(f"providerID {provider_id!r} is not an EC2 instance (aws:///ZONE/i-…)")
    return match["zone"], match["instance"]


def wrap_client_error(
    exc: ClientError | BotoCoreError, what: str, pool: str = ""
) -> RemediatorError:
    """botocore's errors as ours: throttling and 5xx retry later, capacity holds, the rest stop."""
    if not isinstance(exc, ClientError):
        return TransientError(f"AWS: {what}: {type(exc).__name__}: {exc}")
    error = exc.response.get("Error") or {}
    code = str(error.get("Code", ""))
    message = str(error.get("Message", ""))
    status = int((exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)
    text = f"AWS: {what}: {code}: {message}"
    if code in THROTTLING or status == 429:
        return TransientError(text, delay=5.0)
    if code in CAPACITY:
        return CapacityExhausted(pool, f"{code}: {message}")
    if status >= 500 or code in ("InternalFailure", "ServiceUnavailable", "InternalError"):
        return TransientError(text)
    if code in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
        return NotFoundError(text)
    return PermanentError(text)


def same_second_tag(instances: set[str]) -> str:
    """As many ids as one tag value holds (a dozen; more launched in one second is not seen)."""
    value = ""
    for instance in sorted(instances):
        longer = f"{value} {instance}".strip()
        if len(longer) > TAG_VALUE_MAX:
            break
        value = longer
    return value


def _tags(instance: Mapping[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in instance.get("Tags") or ()}


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Progress:
    """What AWS and the cluster show of one replacement."""

    group: str
    old: str
    requested_at: datetime
    old_gone: bool
    new_instance: str | None
    launched_at: datetime | None  # the new instance's launch: its node is timed from there
    new_node: Node | None
    failed_launch: str | None  # the group's latest failed launch since the request
    now: datetime
    launch_timeout: float
    launch_activity: str | None = None  # the scaling activity that launched it, or that failed


def judge(p: Progress) -> Operation:
    """The operation's state from the facts: pure, so each outcome is tested on its own."""
    op_id = f"{p.group}/{p.old}"
    base: dict[str, Any] = {"id": op_id, "pool": p.group, "node": p.old}
    detail = f"instance {p.old} in {p.group}"
    facts = {"auto_scaling_group": p.group, "old_instance": p.old}
    if p.new_instance:
        facts["new_instance"] = p.new_instance
    if p.launch_activity:
        facts["launch_activity"] = p.launch_activity
    base = {**base, "detail": facts}
    if p.new_node is not None and p.new_node.ready:
        return Operation(**base, state=OperationState.SUCCEEDED, new_node=p.new_node.name)
    if p.new_instance is None and p.failed_launch is not None:
        return Operation(
            **base, state=OperationState.FAILED, error=f"launch failed: {p.failed_launch}"
        )
    if not p.old_gone and p.new_instance is None:
        return Operation(**base, state=OperationState.PENDING)
    waited = (p.now - (p.launched_at or p.requested_at)).total_seconds()
    if waited > p.launch_timeout:
        if p.new_instance is None:
            error = f"no instance launched to replace {detail} within {p.launch_timeout:.0f}s"
        else:
            where = f"node {p.new_node.name}" if p.new_node else "no node registered"
            error = (
                f"new instance {p.new_instance} ({where}) not Ready within {p.launch_timeout:.0f}s"
            )
        return Operation(**base, state=OperationState.FAILED, error=f"launch_timeout: {error}")
    return Operation(
        **base,
        state=OperationState.PROVISIONING,
        new_node=p.new_node.name if p.new_node else None,
    )


def reboot_receipt(pool: str, node: str, instance: str, requested_at: str) -> RebootReceipt:
    return RebootReceipt(
        id=instance,
        pool=pool,
        node=node,
        detail={"call": "ec2:RebootInstances", "instance": instance, "requested_at": requested_at},
    )


class AwsAutoScalingProvider:
    def __init__(
        self,
        kube: KubeClient,
        autoscaling: Any,
        ec2: Any,
        *,
        groups: Mapping[str, str] | None = None,
        launch_timeout: float = 900.0,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self._kube = kube
        self._asg = autoscaling
        self._ec2 = ec2
        self._groups = dict(groups or {})
        self._launch_timeout = launch_timeout
        self._now = now

    @classmethod
    def from_settings(
        cls, settings: AwsProviderSettings, kube: KubeClient
    ) -> AwsAutoScalingProvider:
        config = Config(
            region_name=settings.region,
            connect_timeout=min(settings.timeout_seconds, 5.0),
            read_timeout=settings.timeout_seconds,
            retries={"total_max_attempts": settings.max_retries + 1, "mode": "standard"},
        )
        keys = settings.test_credentials
        session = boto3.session.Session(
            aws_access_key_id=keys.access_key_id if keys else None,
            aws_secret_access_key=keys.secret_access_key.get_secret_value() if keys else None,
        )
        clients = [
            session.client(name, endpoint_url=settings.endpoint_url, config=config)
            for name in ("autoscaling", "ec2")
        ]
        return cls(
            kube,
            clients[0],
            clients[1],
            groups=settings.groups,
            launch_timeout=settings.launch_timeout_seconds,
        )

    def group_of(self, pool: str) -> str:
        return self._groups.get(pool, pool)

    def _aws(self, what: str, call: Callable[..., Any], pool: str = "", **kwargs: Any) -> Any:
        try:
            return call(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise wrap_client_error(exc, what, pool) from exc

    # -- the protocol ------------------------------------------------------------------------

    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        tagged = self._instances([{"Name": f"tag:{KEY_TAG}", "Values": [idempotency_key]}])
        if tagged:
            old = str(tagged[0]["InstanceId"])
            group = _tags(tagged[0]).get(GROUP_TAG, self.group_of(pool))
            membership = self._membership(old)
        else:
            _, old = parse_provider_id(self._kube.get_node(node).provider_id)
            membership = self._membership(old)
            if membership is None:
                raise PermanentError(f"instance {old} of node {node} is in no Auto Scaling group")
            group = str(membership["AutoScalingGroupName"])
            expected = self._groups.get(pool)
            if expected is not None and group != expected:
                raise PermanentError(
                    f"instance {old} of node {node} is in group {group}, "
                    f"not {expected} of pool {pool}"
                )
            self._record(old, group, idempotency_key)
        # The instance's own state decides, so a retry after a failed or lost call terminates
        # it exactly when no earlier call did.
        lifecycle = str((membership or {}).get("LifecycleState", "Terminated"))
        if not lifecycle.startswith(LEAVING_LIFECYCLE):
            self._aws(
                f"terminate {old} in {group}",
                self._asg.terminate_instance_in_auto_scaling_group,
                pool,
                InstanceId=old,
                ShouldDecrementDesiredCapacity=False,
            )
        return self.get_operation(f"{group}/{old}")

    def _membership(self, instance: str) -> dict[str, Any] | None:
        found = self._aws(
            f"describe instance {instance}",
            self._asg.describe_auto_scaling_instances,
            InstanceIds=[instance],
        )["AutoScalingInstances"]
        return dict(found[0]) if found else None

    def _record(self, instance: str, group: str, key: str) -> None:
        """Tags written before acting: after a crash they are how the request is found again."""
        now = self._now().astimezone(UTC).replace(microsecond=0)
        tags = [
            {"Key": KEY_TAG, "Value": key},
            {"Key": GROUP_TAG, "Value": group},
            {"Key": REQUESTED_TAG, "Value": now.isoformat()},
        ]
        present = self._launched_since(group, now) - {instance}
        if present:
            tags.append({"Key": PRESENT_TAG, "Value": same_second_tag(present)})
        self._aws(
            f"tag instance {instance}", self._ec2.create_tags, Resources=[instance], Tags=tags
        )

    def _launched_since(self, group: str, since: datetime) -> set[str]:
        """The group's instances launched in the request's second, before it: launch times
        have one-second resolution, so only their ids tell them from the replacement."""
        members = [str(i["InstanceId"]) for i in self._group(group).get("Instances") or ()]
        described = self._instances(instance_ids=members) if members else []
        return {str(i["InstanceId"]) for i in described if _aware(i["LaunchTime"]) >= since}

    def get_operation(self, op_id: str) -> Operation:
        group, sep, old = op_id.rpartition("/")
        if not sep or not group or not old.startswith("i-"):
            raise PermanentError(f"{op_id!r} is not an Auto Scaling replacement id (GROUP/i-…)")
        described = self._instances(instance_ids=[old])
        if not described:
            raise NotFoundError(f"instance {old} of replacement {op_id} does not exist")
        tags = _tags(described[0])
        when = tags.get(REQUESTED_TAG)
        if when is None:
            raise NotFoundError(f"instance {old} carries no replacement request")
        requested_at = datetime.fromisoformat(when)
        old_state = str((described[0].get("State") or {}).get("Name", ""))
        members = {
            str(i["InstanceId"]): str(i.get("LifecycleState", ""))
            for i in self._group(group).get("Instances") or ()
        }
        old_gone = old_state in GONE_STATES or not members.get(old, "InService").startswith(
            ("InService", "Pending")
        )
        launched, failed, activities = self._launches(group, requested_at)
        present = set(tags.get(PRESENT_TAG, "").split())
        chosen = self._claim(old, group, requested_at, launched, members, present)
        new_instance = chosen.instance_id if chosen else None
        activity = activities.get(new_instance or "") or (None if new_instance else failed[1])
        new_node = self._node_of(new_instance) if new_instance else None
        return judge(
            Progress(
                group=group,
                old=old,
                requested_at=requested_at,
                old_gone=old_gone or old not in members,
                new_instance=new_instance,
                launched_at=chosen.launched_at if chosen else None,
                new_node=new_node,
                failed_launch=failed[0],
                now=self._now(),
                launch_timeout=self._launch_timeout,
                launch_activity=activity,
            )
        )

    def spare_capacity(self, pool: str) -> int | None:
        group = self._group(self.group_of(pool), pool)
        spare = int(group["MaxSize"]) - int(group["DesiredCapacity"])
        warm = self._aws(
            f"describe warm pool of {group['AutoScalingGroupName']}",
            self._asg.describe_warm_pool,
            pool,
            AutoScalingGroupName=group["AutoScalingGroupName"],
        )
        warmed = [
            i
            for i in warm.get("Instances") or ()
            if str(i.get("LifecycleState", "")).startswith("Warmed:")
        ]
        return spare + len(warmed)

    def reboot(self, pool: str, node: str, idempotency_key: str, reason: str) -> RebootReceipt:
        """`RebootInstances` on the node's instance, at most once per key (module docstring)."""
        _, instance = parse_provider_id(self._kube.get_node(node).provider_id)
        described = self._instances(instance_ids=[instance])
        if not described:
            raise NotFoundError(f"instance {instance} of node {node} does not exist")
        tags = _tags(described[0])
        if tags.get(REBOOT_KEY_TAG) == idempotency_key:
            return reboot_receipt(pool, node, instance, tags.get(REBOOT_AT_TAG, ""))
        requested = self._now().astimezone(UTC).replace(microsecond=0).isoformat()
        self._aws(
            f"tag instance {instance}",
            self._ec2.create_tags,
            pool,
            Resources=[instance],
            Tags=[
                {"Key": REBOOT_KEY_TAG, "Value": idempotency_key},
                {"Key": REBOOT_AT_TAG, "Value": requested},
            ],
        )
        try:
            self._ec2.reboot_instances(InstanceIds=[instance])
        except ClientError as exc:
            # EC2 answered no: nothing rebooted, so a retry of this key must ask again.
            self._aws(
                f"untag instance {instance}",
                self._ec2.delete_tags,
                pool,
                Resources=[instance],
                Tags=[{"Key": REBOOT_KEY_TAG}, {"Key": REBOOT_AT_TAG}],
            )
            raise wrap_client_error(exc, f"reboot instance {instance}", pool) from exc
        except BotoCoreError as exc:
            raise wrap_client_error(exc, f"reboot instance {instance}", pool) from exc
        return reboot_receipt(pool, node, instance, requested)

    def trigger_maintenance(
        self, pool: str, node: str, event: str, idempotency_key: str, reason: str
    ) -> RebootReceipt:
        """`RebootInstances` for a reboot event (module docstring), once per key."""
        if event not in EC2_REBOOT_EVENTS:
            raise MaintenanceUnsupported(
                f"EC2 event {event} on {node}: no user-initiated call completes it "
                f"(only {', '.join(sorted(EC2_REBOOT_EVENTS))})"
            )
        receipt = self.reboot(pool, node, idempotency_key, reason)
        return RebootReceipt(
            receipt.id, receipt.pool, receipt.node, {**receipt.detail, "event": event}
        )

    # -- reading AWS -------------------------------------------------------------------------

    def _instances(
        self, filters: list[dict[str, Any]] | None = None, instance_ids: list[str] | None = None
    ) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {}
        if filters:
            kwargs["Filters"] = filters
        if instance_ids:
            kwargs["InstanceIds"] = instance_ids
        try:
            pages = self._ec2.get_paginator("describe_instances").paginate(**kwargs)
            return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
        except (ClientError, BotoCoreError) as exc:
            wrapped = wrap_client_error(exc, "describe instances")
            if isinstance(wrapped, NotFoundError):
                return []
            raise wrapped from exc

    def _group(self, name: str, pool: str = "") -> dict[str, Any]:
        groups = self._aws(
            f"describe group {name}",
            self._asg.describe_auto_scaling_groups,
            pool,
            AutoScalingGroupNames=[name],
        )["AutoScalingGroups"]
        if not groups:
            raise NotFoundError(f"Auto Scaling group {name!r} does not exist")
        return dict(groups[0])

    def _launches(
        self, group: str, since: datetime
    ) -> tuple[list[Candidate], tuple[str | None, str | None], dict[str, str]]:
        """Launches since the request, from the scaling activities; the latest failed one
        (its message and activity id); the activity id of each launched instance."""
        activities = self._aws(
            f"describe scaling activities of {group}",
            self._asg.describe_scaling_activities,
            AutoScalingGroupName=group,
        ).get("Activities", [])
        launched: list[Candidate] = []
        failed: tuple[str | None, str | None] = (None, None)
        ids: dict[str, str] = {}
        for activity in activities:
            started = _aware(activity["StartTime"])
            match = LAUNCH_DESCRIPTION.search(str(activity.get("Description", "")))
            if started < since or not str(activity.get("Description", "")).startswith("Launching"):
                continue
            if activity.get("StatusCode") in ("Failed", "Cancelled"):
                if failed[0] is None:
                    message = str(activity.get("StatusMessage") or activity.get("Cause"))
                    failed = (message, activity.get("ActivityId"))
            elif match:
                launched.append(Candidate(match["instance"], started, None))
                ids[match["instance"]] = str(activity.get("ActivityId", ""))
        return launched, failed, ids

    def _claim(
        self,
        old: str,
        group: str,
        requested_at: datetime,
        launched: list[Candidate],
        members: Mapping[str, str],
        present: set[str],
    ) -> Candidate | None:
        """The replacement instance, tagged as ours the first time it is chosen."""
        ids = sorted({*members, *(c.instance_id for c in launched)} - {old} - present)
        described = self._instances(instance_ids=ids) if ids else []
        candidates = [
            Candidate(
                str(i["InstanceId"]),
                _aware(i["LaunchTime"]),
                _tags(i).get(REPLACES_TAG),
            )
            for i in described
            if str((i.get("State") or {}).get("Name")) not in GONE_STATES
        ]
        chosen = choose_replacement(old, requested_at, candidates)
        if chosen is None:
            return None
        if chosen.claimed_for is None:
            self._aws(
                f"tag instance {chosen.instance_id}",
                self._ec2.create_tags,
                Resources=[chosen.instance_id],
                Tags=[{"Key": REPLACES_TAG, "Value": old}],
            )
        return chosen

    def _node_of(self, instance: str) -> Node | None:
        for node in self._kube.list_nodes():
            if node.provider_id.rsplit("/", 1)[-1] == instance:
                return node
        return None
