"""A leader stops acting on its own clock: `may_act` lapses at the renew deadline after the start
of its last successful renewal, whether or not the election loop has noticed yet (a renewal
stuck in a slow request); and it renews with one PUT of the record it holds."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from remediator.clock import FakeClock
from remediator.errors import ApiUnavailable, NotFoundError
from remediator.kube.client import KubeClient
from remediator.kube.leader import LeaderElector
from remediator.kube.objects import Lease


class Leases:
    """The three lease calls the elector makes, in memory; `down` makes every call fail."""

    def __init__(self, clock: FakeClock, slow: float = 0.0) -> None:
        self.lease: Lease | None = None
        self.down = False
        self.calls: list[str] = []
        self.clock, self.slow = clock, slow
        self.version = 0

    def _call(self, name: str) -> None:
        self.calls.append(name)
        self.clock.advance(self.slow)
        if self.down:
            raise ApiUnavailable(f"{name}: 503 The server is currently unable", 1.0, 503)

    def _stored(self, lease: Lease) -> Lease:
        self.version += 1
        self.lease = replace(lease, resource_version=str(self.version))
        return self.lease

    def get_lease(self, namespace: str, name: str, timeout: float | None = None) -> Lease:
        self._call("get")
        if self.lease is None:
            raise NotFoundError("leases x not found")
        return self.lease

    def create_lease(self, lease: Lease, timeout: float | None = None) -> Lease:
        self._call("create")
        return self._stored(lease)

    def replace_lease(self, lease: Lease, timeout: float | None = None) -> Lease:
        self._call("update")
        return self._stored(lease)


def elector(leases: Leases, clock: FakeClock) -> LeaderElector:
    return LeaderElector(
        cast(KubeClient, leases),
        namespace="ns",
        name="lease",
        identity="me",
        lease_duration=15,
        renew_deadline=10.0,
        retry_period=2.0,
        clock=clock,
    )


def test_may_act_lapses_at_the_renew_deadline_even_before_the_loop_notices() -> None:
    clock = FakeClock()
    leases = Leases(clock)
    candidate = elector(leases, clock)
    candidate.step()
    assert candidate.is_leader and candidate.may_act()
    clock.advance(9.9)
    assert candidate.may_act()
    clock.advance(0.2)  # no renewal for just over the renew deadline; the loop has not run
    assert candidate.is_leader and not candidate.may_act()


def test_the_deadline_counts_from_before_a_slow_renewal_was_sent() -> None:
    clock = FakeClock()
    leases = Leases(clock, slow=4.0)  # every request takes 4 s to answer
    candidate = elector(leases, clock)
    candidate.step()  # get (404) + create: sent at 0, answered at 8
    assert candidate.may_act()
    clock.advance(1.9)  # 9.9 s after the renewal was sent
    assert candidate.may_act()
    clock.advance(0.2)
    assert not candidate.may_act()


def test_renewals_are_one_put_and_failures_step_down_after_the_deadline() -> None:
    clock = FakeClock()
    leases = Leases(clock)
    candidate = elector(leases, clock)
    candidate.step()
    assert leases.calls == ["get", "create"]
    clock.advance(2.0)
    candidate.step()
    assert leases.calls[2:] == ["update"]  # the fast path: no GET first
    leases.down = True
    for _ in range(5):
        clock.advance(2.0)
        candidate.step()
        assert candidate.is_leader  # within the deadline it still leads
    clock.advance(2.0)
    candidate.step()
    assert not candidate.is_leader and not candidate.may_act()
