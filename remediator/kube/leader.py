"""Leader election on a coordination.k8s.io/v1 Lease, with our own loop.

The client library's elector blocks in run(), never re-enters the election after losing, exits
the process on config errors, does not maintain leaseTransitions and does not release on
shutdown. This one runs in a daemon thread, competes again after losing, counts transitions,
and clears holderIdentity on a clean stop so that a standby takes over at once.

Every write names the resourceVersion it read: two candidates racing for a free lease cannot both
win, the loser gets a 409. A held lease counts as expired only once we have watched it stay
unrenewed for its duration on our own clock (nodes' wall clocks differ), so a fresh candidate
waits one lease duration before taking over from a holder that died.

A leader that cannot renew stops acting on its own clock: `may_act()` holds only until the
renew deadline after the start of its last successful renewal, and the deadline is shorter than
the lease, so it has stopped before any standby can count the lease expired. Lease requests time
out within the retry period, so a hung apiserver cannot keep the loop from noticing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from remediator.clock import Clock, SystemClock
from remediator.errors import ConflictError, NotFoundError, RemediatorError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Lease
from remediator.settings import LeaderElectionSettings

log = logging.getLogger(__name__)

Callback = Callable[[], None]


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


def next_record(
    current: Lease | None, identity: str, now: datetime, duration: int, unchanged_for: float
) -> Lease | None:
    """The lease we would write to hold it, or None when someone else validly holds it;
    `unchanged_for` is how long we have been seeing `current` exactly as it is."""
    if current is None:
        return Lease("", "", identity, duration, now, now, 0)
    if current.holder == identity:
        return replace(current, renew_time=now, duration_seconds=duration)
    if not current.expired(unchanged_for):
        return None
    return replace(
        current,
        holder=identity,
        duration_seconds=duration,
        acquire_time=now,
        renew_time=now,
        transitions=current.transitions + 1,
    )


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str | None = None,
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        clock: Clock | None = None,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self._client = client
        self._namespace = namespace
        self._name = name
        self.identity = identity or default_identity()
        self._duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock or SystemClock()
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_renew = 0.0
        self._seen: tuple[str, float] | None = None  # (resourceVersion, monotonic first seen)
        self._held: Lease | None = None  # the record we last wrote, while we lead
        self.observed_holder: str | None = None

    @classmethod
    def from_settings(
        cls,
        client: KubeClient,
        settings: LeaderElectionSettings,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
    ) -> LeaderElector:
        return cls(
            client,
            namespace=settings.namespace,
            name=settings.lease_name,
            identity=settings.identity,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
            on_started_leading=on_started_leading,
            on_stopped_leading=on_stopped_leading,
        )

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    # -- one attempt -------------------------------------------------------------------------

    def may_act(self) -> bool:
        """True while we lead and are inside the renew deadline of our last successful renewal."""
        return (
            self._leading.is_set()
            and self._clock.monotonic() < self._last_renew + self._renew_deadline
        )

    def try_acquire_or_renew(self) -> bool:
        """One round: True when we hold the lease after it."""
        now = self._clock.now()
        timeout = max(0.5, min(self._retry, self._renew_deadline / 2))
        if self._held is not None and self._leading.is_set():
            # Fast path (client-go's too): renew the record we last wrote with one PUT; its
            # resourceVersion makes it fail with 409 if anyone else wrote since.
            try:
                renewed = replace(self._held, renew_time=now, duration_seconds=self._duration)
                self._held = self._client.replace_lease(renewed, timeout=timeout)
                self.observed_holder = self.identity
                return True
            except RemediatorError as exc:
                log.info(
                    "lease %s/%s: renewal by PUT failed, re-reading: %s",
                    self._namespace,
                    self._name,
                    exc,
                )
                self._held = None
        try:
            try:
                current: Lease | None = self._client.get_lease(
                    self._namespace, self._name, timeout=timeout
                )
            except NotFoundError:
                current = None
            self.observed_holder = current.holder if current else None
            unchanged_for = self._unchanged_for(current)
            wanted = next_record(current, self.identity, now, self._duration, unchanged_for)
            if wanted is None:
                return False
            if current is None:
                self._held = self._client.create_lease(
                    replace(wanted, namespace=self._namespace, name=self._name), timeout=timeout
                )
            else:
                self._held = self._client.replace_lease(wanted, timeout=timeout)
        except ConflictError:
            return False  # another candidate wrote first
        except RemediatorError as exc:
            log.warning("leader election %s/%s: %s", self._namespace, self._name, exc)
            return False
        return True

    def _unchanged_for(self, lease: Lease | None) -> float:
        """Seconds, by our monotonic clock, since we first saw this version of the lease."""
        version = lease.resource_version if lease else ""
        mono = self._clock.monotonic()
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, mono)
        return mono - self._seen[1]

    def release(self) -> bool:
        """Give the lease up now (only if we hold it), so a standby need not wait it out."""
        try:
            current = self._client.get_lease(self._namespace, self._name)
            if current.holder != self.identity:
                return False
            self._client.replace_lease(
                replace(current, holder=None, duration_seconds=1, renew_time=self._clock.now())
            )
        except RemediatorError as exc:
            log.warning("releasing lease %s/%s: %s", self._namespace, self._name, exc)
            return False
        return True

    # -- the loop ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("leader elector already started")
        self._thread = threading.Thread(
            target=self._run, name=f"leader-election-{self._name}", daemon=True
        )
        self._thread.start()

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        """Leave the election; with `release`, hand the lease over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else self._retry + 15.0)
        if self._leading.is_set():
            if release:
                self.release()
            self._lose()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._stop.wait(self._retry)

    def step(self) -> None:
        """One round of the loop: acquire or renew, and start or stop leading accordingly."""
        # The renewal counts from before it was sent: a standby's timer starts no earlier.
        attempted = self._clock.monotonic()
        held = self.try_acquire_or_renew()
        mono = self._clock.monotonic()
        if held:
            self._last_renew = attempted
            if not self._leading.is_set():
                log.info("%s became leader of %s/%s", self.identity, self._namespace, self._name)
                self._leading.set()
                self._call(self._on_started)
        elif self._leading.is_set() and self._lost(mono):
            log.warning("%s lost leadership of %s/%s", self.identity, self._namespace, self._name)
            self._lose()

    def _lost(self, mono: float) -> bool:
        """Someone else holds the lease now, or we could not renew before the deadline."""
        taken = self.observed_holder not in (None, self.identity)
        return taken or mono - self._last_renew > self._renew_deadline

    def _lose(self) -> None:
        self._held = None
        if self._leading.is_set():
            self._leading.clear()
            self._call(self._on_stopped)

    @staticmethod
    def _call(callback: Callback | None) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("leader election callback failed")
