"""Dead ends after the node left (issue 22 item 12), against the simulator's real wire protocols:
an Auto Scaling group that replaced the node itself (boto3 against moto terminates the instance in
its group, the group launches another), and a human who deleted the Machine (stock kubectl
against the simulator's Cluster API). The remediation ends as replaced naming the pool's new
node, or with the outcome "node gone"; a retry on the gone node ends it instead of failing on
`get node …: 404` for ever."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import boto3
import pytest

from remediator.clock import FakeClock, utcnow
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.model.states import State
from remediator.providers.clusterapi import ClusterApiProvider
from remediator.remediation import commands
from remediator.remediation.node_gone import NODE_GONE, end_all_gone
from remediator.remediation.service import RemediationService
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.records import NewRemediation, RemediationRecord
from remediator.store.repository import Repository
from tests.fixtures.sim import SimHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

POOL = "h100-train"
POOL_LABEL = "simcloud.io/nodepool"
LADDER = [{"action": "cordon"}, {"action": "drain"}, {"action": "replace"}]


@pytest.fixture
def repository_for(
    sqlite_head_template: Path, tmp_path: Path
) -> Callable[[KubeClient], Repository]:
    def open_for(kube: KubeClient) -> Repository:
        """A store whose requests are made just after the seeded nodes joined (creation times
        have one-second resolution), once the clock has passed that second: every node the pool
        brings in from now on joined after the request."""
        seeded = max(n.created_at for n in kube.list_nodes() if n.created_at is not None)
        deadline = time.monotonic() + 30
        while utcnow() < seeded + timedelta(seconds=1):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
        engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
        clock = FakeClock(seeded + timedelta(milliseconds=500))
        return Repository(db.make_session_factory(engine), "default", clock)

    return open_for


@pytest.fixture
def kube_for() -> Iterator[Callable[[SimHandle], KubeClient]]:
    opened: list[KubeClient] = []

    def open_for(sim: SimHandle) -> KubeClient:
        client = KubeClient.from_kubeconfig(sim.kubeconfig)
        opened.append(client)
        return client

    yield open_for
    for client in opened:
        client.close()


def failed_in_quarantine(
    repository: Repository, node: str, *, replacing: bool = False
) -> RemediationRecord:
    """A remediation that failed in its cordon step, fencing its node (and, before the fix,
    counting toward its pool's budget until a human cancelled it); `replacing`: failed in its
    replacement instead (`replacement_failed`, as the planner writes it)."""
    signal = Signal(
        node=node, kind=SignalKind.XID, source="test", observed_at=repository.now(), gpu=0, code=79
    )
    record = repository.create(
        NewRemediation(
            node=node, policy="xid-79", reason="test", signals=[signal], ladder=LADDER, pool=POOL
        ),
        actor="test",
    )
    moves = (
        [(State.DETECTED, State.QUARANTINED), (State.QUARANTINED, State.FAILED)]
        if not replacing
        else [
            (State.DETECTED, State.QUARANTINED),
            (State.QUARANTINED, State.DRAINING),
            (State.DRAINING, State.REPLACING),
            (State.REPLACING, State.FAILED),
        ]
    )
    for before, after in moves:
        action = "replacement_failed" if after is State.FAILED and replacing else "test"
        record = repository.transition(record.id, before, after, action=action, actor="test")
    return record


def joined(kube: KubeClient, old: str, count: int, timeout: float = 60.0) -> list[Node]:
    """The pool's nodes once `old` is gone and the pool is back to `count` Ready nodes."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = kube.list_nodes()
        mine = [n for n in nodes if n.labels.get(POOL_LABEL) == POOL and n.ready]
        if old not in {n.name for n in nodes} and len(mine) == count:
            return nodes
        assert time.monotonic() < deadline, [n.name for n in nodes]
        time.sleep(0.2)


def test_a_human_deleted_the_machine_its_machineset_replaced_it(
    sim_factory: Callable[..., SimHandle],
    kube_for: Callable[[SimHandle], KubeClient],
    repository_for: Callable[[KubeClient], Repository],
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.3, cloud="clusterapi")
    kube = kube_for(sim)
    repository = repository_for(kube)
    pool_size = len([n for n in kube.list_nodes() if n.labels.get(POOL_LABEL) == POOL])
    record = failed_in_quarantine(repository, "h100-train-0000")
    sim.kubectl("delete", "machine", "-n", "default", "h100-train-0000")
    nodes = joined(kube, "h100-train-0000", pool_size)
    new = {n.name for n in nodes if n.labels.get(POOL_LABEL) == POOL} - {
        f"h100-train-{i:04d}" for i in range(4)
    }

    (ended,) = end_all_gone(repository, nodes, POOL_LABEL, "test")
    assert (ended.id, ended.state, ended.outcome) == (record.id, State.SUCCEEDED, "replaced")
    assert {ended.new_node} == new
    events = (repository.get(ended.id) or ended).events
    assert f"replaced it with {ended.new_node}" in events[-1].detail["reason"]

    # A node deleted by hand, with no Machine deleted: nothing replaces it. The pool's new node
    # is already the first remediation's replacement, so it is nobody else's.
    second = failed_in_quarantine(repository, "h100-train-0001")
    sim.kubectl("delete", "node", "h100-train-0001")
    nodes = joined(kube, "h100-train-0001", pool_size - 1)
    (gone,) = end_all_gone(repository, nodes, POOL_LABEL, "test")
    assert (gone.id, gone.state, gone.outcome) == (second.id, State.CANCELLED, NODE_GONE)
    assert gone.new_node is None and gone.suppressed_until is None

    # A remediation whose own replacement took its node away and then failed (the new Machine's
    # Node never turned Ready): nothing to end, the failure stays for a human.
    third = failed_in_quarantine(repository, "h100-train-0002", replacing=True)
    sim.kubectl("delete", "node", "h100-train-0002")
    nodes = joined(kube, "h100-train-0002", pool_size - 2)
    assert end_all_gone(repository, nodes, POOL_LABEL, "test") == []
    kept = repository.get(third.id)
    assert kept is not None and kept.state is State.FAILED


def test_retry_on_a_gone_node_ends_it_instead_of_failing_on_404(
    sim_factory: Callable[..., SimHandle],
    kube_for: Callable[[SimHandle], KubeClient],
    repository_for: Callable[[KubeClient], Repository],
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.3, cloud="clusterapi")
    kube = kube_for(sim)
    repository = repository_for(kube)
    record = failed_in_quarantine(repository, "h100-train-0002")
    sim.kubectl("delete", "node", "h100-train-0002")
    joined(kube, "h100-train-0002", 2)
    service = RemediationService(
        repository,
        kube,
        ClusterApiProvider(kube),
        FakeClock(),
        actor="test",
        pool_label=POOL_LABEL,
    )
    retried = commands.run(repository, "retry", record.id, actor="on-call")
    assert retried.state is State.QUARANTINED
    after = service.advance(record.id)
    assert after is not None
    assert (after.state, after.outcome) == (State.CANCELLED, NODE_GONE)
    assert "h100-train-0002 left the cluster" in (after.hold_reason or "")


def test_an_auto_scaling_group_replaced_the_node_itself(
    sim_factory: Callable[..., SimHandle],
    kube_for: Callable[[SimHandle], KubeClient],
    repository_for: Callable[[KubeClient], Repository],
) -> None:
    sim = sim_factory(nodes=4, provision_delay=0.3, cloud="aws")
    kube = kube_for(sim)
    repository = repository_for(kube)
    pool_size = len([n for n in kube.list_nodes() if n.labels.get(POOL_LABEL) == POOL])
    node = "h100-train-0000"
    instance = kube.get_node(node).provider_id.rsplit("/", 1)[-1]
    record = failed_in_quarantine(repository, node)
    keys = sim.provider["test_credentials"]
    autoscaling = boto3.client(
        "autoscaling",
        endpoint_url=sim.provider["endpoint_url"],
        region_name=sim.provider["region"],
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )
    autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=False
    )
    nodes = joined(kube, node, pool_size)
    before = {n.name for n in nodes if n.created_at and n.created_at < record.created_at}
    new = {n.name for n in nodes if n.labels.get(POOL_LABEL) == POOL} - before

    (ended,) = end_all_gone(repository, nodes, POOL_LABEL, "test")
    assert (ended.id, ended.state, ended.outcome) == (record.id, State.SUCCEEDED, "replaced")
    assert {ended.new_node} == new and ended.new_node is not None
    assert ended.new_node.startswith("ip-")
