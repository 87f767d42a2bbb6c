"""The AWS provider's decisions (pure) and its error wrapping, then the provider against a real
moto server (its own process, the real AWS query protocol) with a real simulated cluster."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError

from remediator.errors import NotFoundError, PermanentError, TransientError
from remediator.kube.objects import Node, NodeCondition
from remediator.providers.aws import (
    AwsAutoScalingProvider,
    Progress,
    judge,
    parse_provider_id,
    same_second_tag,
    wrap_client_error,
)
from remediator.providers.base import CapacityExhausted, OperationState
from remediator.providers.replacement import Candidate, choose_replacement

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "TerminateInstanceInAutoScalingGroup",
    )


def node(name: str, ready: bool) -> Node:
    return Node(
        name=name,
        uid="u",
        resource_version="1",
        conditions=(NodeCondition("Ready", "True" if ready else "False"),),
    )


def progress(**changes: Any) -> Progress:
    values: dict[str, Any] = {
        "group": "g",
        "old": "i-0old",
        "requested_at": T0,
        "old_gone": True,
        "new_instance": None,
        "launched_at": None,
        "new_node": None,
        "failed_launch": None,
        "now": T0 + timedelta(seconds=10),
        "launch_timeout": 60.0,
    }
    values.update(changes)
    return Progress(**values)


def test_provider_id_parses_and_rejects() -> None:
    assert parse_provider_id("aws:///us-east-1a/i-0abc123") == ("us-east-1a", "i-0abc123")
    with pytest.raises(PermanentError, match="not an EC2 instance"):
        parse_provider_id("gce://p/z/n")


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("Throttling", 400, TransientError),
        ("RequestLimitExceeded", 503, TransientError),
        ("InternalFailure", 500, TransientError),
        ("InsufficientInstanceCapacity", 400, CapacityExhausted),
        ("InvalidInstanceID.NotFound", 400, NotFoundError),
        ("ValidationError", 400, PermanentError),
    ],
)
def test_client_errors_are_wrapped_by_what_retrying_can_do(
    code: str, status: int, kind: type
) -> None:
    wrapped = wrap_client_error(client_error(code, status), "terminate", "pool")
    assert type(wrapped) is kind
    assert code in str(wrapped)


def test_replacement_is_the_claimed_one_else_the_earliest_free_launch_after_the_request() -> None:
    before = Candidate("i-1", T0 - timedelta(seconds=1), None)
    other = Candidate("i-2", T0 + timedelta(seconds=1), "i-0other")
    late = Candidate("i-4", T0 + timedelta(seconds=3), None)
    early = Candidate("i-3", T0 + timedelta(seconds=2), None)
    assert choose_replacement("i-0old", T0, [before, other, late, early]) == early
    mine = Candidate("i-5", T0 + timedelta(seconds=9), "i-0old")
    assert choose_replacement("i-0old", T0, [early, mine]) == mine
    assert choose_replacement("i-0old", T0, [before, other]) is None


def test_instances_of_the_request_second_fit_one_tag_value() -> None:
    ids = {f"i-{n:017x}" for n in range(20)}
    value = same_second_tag(ids)
    assert len(value) <= 256 and value.split() == sorted(ids)[:12]
    assert same_second_tag({"i-0b", "i-0a"}) == "i-0a i-0b"


def test_judge_each_outcome() -> None:
    assert judge(progress(old_gone=False)).state is OperationState.PENDING
    waiting = judge(progress(new_instance="i-new"))
    assert waiting.state is OperationState.PROVISIONING
    assert waiting.detail["new_instance"] == "i-new"
    joining = judge(progress(new_instance="i-new", new_node=node("ip-1", False)))
    assert (joining.state, joining.new_node) == (OperationState.PROVISIONING, "ip-1")
    done = judge(progress(new_instance="i-new", new_node=node("ip-1", True)))
    assert (done.state, done.new_node, done.id) == (OperationState.SUCCEEDED, "ip-1", "g/i-0old")
    failed = judge(
        progress(failed_launch="InsufficientInstanceCapacity: none left", launch_activity="a-1")
    )
    assert failed.state is OperationState.FAILED
    assert "InsufficientInstanceCapacity" in (failed.error or "")
    assert failed.detail["launch_activity"] == "a-1"  # the timeline names AWS's activity
    late = T0 + timedelta(seconds=61)
    stuck = judge(progress(new_instance="i-new", new_node=node("ip-1", False), now=late))
    assert stuck.state is OperationState.FAILED
    assert "i-new (node ip-1) not Ready within 60s" in (stuck.error or "")
    nothing = judge(progress(now=late))
    assert "no instance launched" in (nothing.error or "")
    # A node is timed from its instance's launch, not from a request that took retries.
    launched = T0 + timedelta(seconds=30)
    fresh = progress(new_instance="i-new", launched_at=launched, now=late)
    assert judge(fresh).state is OperationState.PROVISIONING
    # Before the old instance leaves nothing has been launched yet: pending, never timed out.
    assert judge(progress(old_gone=False, now=late)).state is OperationState.PENDING


# -- against moto ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto's server as its own process, as a user would run it."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/moto-api/", timeout=2)
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


class FakeKube:
    """Only the two reads the provider makes, over a fixed set of Ready Nodes."""

    def __init__(self, nodes: dict[str, str]) -> None:
        self.nodes = nodes  # name → providerID

    def get_node(self, name: str) -> Node:
        if name not in self.nodes:
            raise NotFoundError(name)
        ready = (NodeCondition("Ready", "True"),)
        return Node(
            name=name, uid="u", resource_version="1", provider_id=self.nodes[name], conditions=ready
        )

    def list_nodes(self) -> list[Node]:
        return [self.get_node(n) for n in self.nodes]


def clients(url: str) -> tuple[Any, Any]:
    kw = {
        "endpoint_url": url,
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    return boto3.client("autoscaling", **kw), boto3.client("ec2", **kw)


def test_terminating_twice_launches_once_and_spare_is_max_minus_desired(moto_url: str) -> None:
    asg, ec2 = clients(moto_url)
    group = f"g-{time.monotonic_ns()}"
    ec2.create_launch_template(
        LaunchTemplateName=group, LaunchTemplateData={"ImageId": "ami-12c6146b"}
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName=group,
        LaunchTemplate={"LaunchTemplateName": group, "Version": "$Latest"},
        MinSize=0,
        MaxSize=5,
        DesiredCapacity=2,
        AvailabilityZones=["us-east-1a"],
    )
    members = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
    old = members["AutoScalingGroups"][0]["Instances"][0]["InstanceId"]
    kube = FakeKube({"n-old": f"aws:///us-east-1a/{old}"})
    provider = AwsAutoScalingProvider(kube, asg, ec2)  # type: ignore[arg-type]
    assert provider.spare_capacity(group) == 3

    first = provider.request_replacement(group, "n-old", "key-1", "xid 79")
    second = provider.request_replacement(group, "n-old", "key-1", "xid 79")
    assert first.id == second.id == f"{group}/{old}"
    assert first.state is OperationState.PROVISIONING
    new = first.detail["new_instance"]
    assert second.detail["new_instance"] == new
    # The group was made in the request's own second: its other instance is no replacement.
    assert new not in {i["InstanceId"] for i in members["AutoScalingGroups"][0]["Instances"]}

    # The new instance registers as a Node and turns Ready: the operation succeeds.
    kube.nodes["n-new"] = f"aws:///us-east-1a/{new}"
    kube.nodes.pop("n-old")
    assert provider.get_operation(first.id).state is OperationState.SUCCEEDED
    assert provider.request_replacement(group, "n-old", "key-1", "xid 79").new_node == "n-new"

    reservations = ec2.describe_instances(
        Filters=[{"Name": "tag:remediator.io/replaces", "Values": [old]}]
    )["Reservations"]
    assert [i["InstanceId"] for r in reservations for i in r["Instances"]] == [new]
    group_now = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
    assert len(group_now["AutoScalingGroups"][0]["Instances"]) == 2


def test_a_node_outside_any_group_is_a_clear_permanent_error(moto_url: str) -> None:
    asg, ec2 = clients(moto_url)
    kube = FakeKube({"n": "aws:///us-east-1a/i-0123456789abcdef0"})
    provider = AwsAutoScalingProvider(kube, asg, ec2)  # type: ignore[arg-type]
    with pytest.raises(PermanentError, match="in no Auto Scaling group"):
        provider.request_replacement("p", "n", "key-x", "r")
