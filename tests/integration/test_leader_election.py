"""Two (and three) electors competing for one Lease on the simulator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from remediator.clock import Clock, SystemClock
from remediator.kube.client import KubeClient
from remediator.kube.leader import LeaderElector
from remediator.kube.objects import Lease
from tests.fixtures.sim import SimHandle
from tests.integration.actions_support import wait_for

pytestmark = pytest.mark.integration

NS, NAME = "kube-system", "remediator-test"
DURATION = 3


@pytest.fixture
def kube(sim: SimHandle) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(sim.kubeconfig, timeout=5.0) as client:
        yield client


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def started(self) -> None:
        self.events.append("started")

    def stopped(self) -> None:
        self.events.append("stopped")


class ClockAhead(SystemClock):
    """The real clock of a node whose wall time runs an hour ahead (its monotonic clock is fine)."""

    def now(self) -> datetime:
        return super().now() + timedelta(hours=1)


def elector(
    kube: KubeClient, identity: str, rec: Recorder, clock: Clock | None = None
) -> LeaderElector:
    return LeaderElector(
        kube,
        namespace=NS,
        name=NAME,
        identity=identity,
        lease_duration=DURATION,
        renew_deadline=2.0,
        retry_period=0.25,
        on_started_leading=rec.started,
        on_stopped_leading=rec.stopped,
        clock=clock,
    )


def test_one_leader_failover_and_release(sim: SimHandle, kube: KubeClient) -> None:
    recs = {name: Recorder() for name in ("a", "b", "c")}
    a, b = elector(kube, "a", recs["a"]), elector(kube, "b", recs["b"])
    a.start()
    b.start()
    wait_for(lambda: a.is_leader or b.is_leader, 10, "a leader")
    for _ in range(12):  # several renew periods: never two leaders, never a change
        assert a.is_leader != b.is_leader
        time.sleep(0.1)
    leader, standby = (a, b) if a.is_leader else (b, a)
    lease = kube.get_lease(NS, NAME)
    assert lease.holder == leader.identity and lease.transitions == 0
    holder = sim.kubectl("get", "lease", NAME, "-n", NS, "-o", "jsonpath={.spec.holderIdentity}")
    assert holder == leader.identity

    # The leader dies without releasing: the standby waits out the lease, then takes over.
    crashed = time.monotonic()
    leader.stop(release=False)
    # Never before the lease expires; after it, as soon as a loaded machine gets there.
    wait_for(lambda: standby.is_leader, 60, "takeover after expiry")
    assert time.monotonic() - crashed >= DURATION - 1
    assert recs[leader.identity].events == ["started", "stopped"]
    taken = kube.get_lease(NS, NAME)
    assert taken.holder == standby.identity and taken.transitions == 1

    # A clean stop releases: a fresh candidate takes over at once, not a lease later.
    c = elector(kube, "c", recs["c"])
    c.start()
    time.sleep(0.6)
    assert not c.is_leader
    released = time.monotonic()
    standby.stop(release=True)
    assert kube.get_lease(NS, NAME).holder is None
    wait_for(lambda: c.is_leader, DURATION, "takeover after release")
    assert time.monotonic() - released < 1.5
    assert kube.get_lease(NS, NAME).transitions == 2
    c.stop()
    assert kube.get_lease(NS, NAME).holder is None and recs["c"].events == ["started", "stopped"]


def test_leader_steps_down_when_taken_and_competes_again(kube: KubeClient) -> None:
    rec = Recorder()
    a = elector(kube, "a", rec)
    a.start()
    try:
        wait_for(lambda: a.is_leader, 10, "leadership")
        # Someone else (say, a partitioned replica's write landing) holds the lease now.
        current = kube.get_lease(NS, NAME)
        kube.replace_lease(
            Lease(
                NS,
                NAME,
                "intruder",
                DURATION,
                current.renew_time,
                current.renew_time,
                current.transitions + 1,
                current.resource_version,
            )
        )
        wait_for(lambda: not a.is_leader, 5, "stepping down")
        # The intruder never renews: once its lease expires, a wins it back.
        wait_for(lambda: a.is_leader, DURATION + 5, "re-election")
        assert rec.events == ["started", "stopped", "started"]
        assert kube.get_lease(NS, NAME).transitions == current.transitions + 2
    finally:
        a.stop()


def test_a_clock_running_ahead_does_not_steal_a_renewed_lease(kube: KubeClient) -> None:
    recs = {name: Recorder() for name in ("a", "b")}
    a = elector(kube, "a", recs["a"])
    a.start()
    try:
        wait_for(lambda: a.is_leader, 10, "leadership")
        b = elector(kube, "b", recs["b"], clock=ClockAhead())
        b.start()
        try:
            # Longer than the lease: b sees a's renewTime an hour old by its own wall clock,
            # yet a renews all along, so a keeps the lease.
            deadline = time.monotonic() + DURATION + 1
            while time.monotonic() < deadline:
                assert a.is_leader and not b.is_leader
                time.sleep(0.1)
            assert kube.get_lease(NS, NAME).holder == "a" and recs["b"].events == []
            # Once a is gone for good, b still takes over, by its own clock.
            a.stop(release=False)
            wait_for(lambda: b.is_leader, DURATION + 3, "takeover after expiry")
        finally:
            b.stop()
    finally:
        a.stop()
