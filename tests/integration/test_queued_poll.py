"""A queued remediation's poll (issue 24: after a storm 2,000 wait in the queue). Each is cordoned
once, through the simulator's real API; its later polls read it again only when its row moved,
and then act on what moved."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.kube.client import KubeClient
from remediator.providers.clusterapi import ClusterApiProvider
from remediator.remediation import planner
from remediator.remediation.service import RemediationService, last_queued_action
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.records import NewRemediation, RemediationRecord
from remediator.store.repository import Repository
from tests.fixtures.sim import SimHandle

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

NODES = ["h100-train-0000", "h100-train-0001"]


class CountingRepository(Repository):
    """The store, counting the whole-row reads a tick makes."""

    gets = 0

    def get(self, remediation_id: int) -> RemediationRecord | None:
        self.gets += 1
        return super().get(remediation_id)


@pytest.fixture
def kube(sim_factory: Callable[..., SimHandle]) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(sim_factory(nodes=4, cloud="clusterapi").kubeconfig)
    yield client
    client.close()


def test_a_queued_node_is_cordoned_once_and_read_again_only_when_its_row_moves(
    kube: KubeClient, sqlite_head_template: Path, tmp_path: Path
) -> None:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    clock = FakeClock()
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    repository = CountingRepository(db.make_session_factory(engine), "default", clock)
    queued = [
        repository.create(
            NewRemediation(
                node=node,
                policy="xid-79",
                reason="test",
                signals=[
                    Signal(
                        node=node,
                        kind=SignalKind.XID,
                        source="test",
                        observed_at=clock.now(),
                        code=79,
                    )
                ],
                ladder=[{"action": "cordon"}, {"action": "drain"}],
                pool="h100-train",
                while_queued="cordon",
            ),
            actor="test",
            queued="budget",
            hold_reason="max unhealthy in pool h100-train (1)",
        )
        for node in NODES
    ]
    service = RemediationService(
        repository, kube, ClusterApiProvider(kube), clock, actor="test", pool_label="pool"
    )

    def poll() -> int:
        """One tick once every wait is over; the whole-row reads it made."""
        clock.advance(planner.HUMAN_POLL_SECONDS)
        before = repository.gets
        service.advance_due()
        return repository.gets - before

    assert poll() == 2
    assert all(kube.get_node(node).unschedulable for node in NODES)
    for _ in range(3):
        assert poll() == 0
    for record in queued:
        loaded = repository.get(record.id)
        assert loaded is not None and last_queued_action(loaded) == "queued_cordon"
        assert [e.action for e in loaded.events].count("queued_cordon") == 1

    # The breaker takes over the first one's hold: its row moves, so the next poll reads it and
    # lifts the quarantine; the other one is not read.
    first = queued[0]
    repository.update_fields(first.id, first.version, queue_cause="breaker")
    assert poll() == 1
    assert not kube.get_node(NODES[0]).unschedulable
    assert kube.get_node(NODES[1]).unschedulable
    assert poll() == 0
