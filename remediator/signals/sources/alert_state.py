"""Firing Alertmanager alerts, held between notifications.

Alertmanager notifies a group once (after `group_wait`), again only when the group changes
(`group_interval`) or every `repeat_interval` (4 h by default), and once more when an alert
resolves. A firing alert is a state that holds until then, so this source keeps each one (by its
fingerprint) and re-announces it at every poll, stamped with the poll's time and carrying its
`since`: a threshold policy with `for: 2m` matches an alert that has held for two minutes
without needing a stream of notifications. A resolved notification ends it at once. An alert
Alertmanager has not re-sent for longer than `hold` (past its `repeat_interval`) is dropped
rather than trusted forever: the Alertmanager may be gone, and silence proves nothing.

Kept in memory on the leader. After a restart or failover, when it is given Alertmanager's API
(`signals.alertmanager_url`), the first poll reads the alerts Alertmanager is firing to our
receiver and holds those (the API is the truth then: what it no longer fires is dropped); until
that read succeeds the source is down, with the reason. Without the API a firing alert is known
again at its next notification, at the latest `repeat_interval` later.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Protocol

from remediator.errors import RemediatorError
from remediator.signals.model import Signal
from remediator.signals.sources.alertmanager import Alert, AlertBatch, AlertMapping, map_alerts
from remediator.signals.sources.base import HealthTracker, SourceResult

# Alertmanager's default repeat_interval is 4 h; a margin for its retries and our restarts.
DEFAULT_HOLD = timedelta(hours=4, minutes=30)
# Polls further apart than this mean the poll job was not running: this replica did not lead.
RESYNC_AFTER = timedelta(minutes=2)


class FiringSource(Protocol):
    """What the resync needs of Alertmanager's API (alertmanager_api.AlertmanagerAPI)."""

    def firing(self) -> list[Alert]: ...

    def close(self) -> None: ...


class FiringAlerts:
    """Thread-safe: the webhook handler records, the controller's poll job reads."""

    def __init__(
        self,
        hold: timedelta = DEFAULT_HOLD,
        name: str = "alertmanager",
        capacity: int = 100_000,
        *,
        api: FiringSource | None = None,
        mapping: AlertMapping | None = None,
        resync_after: timedelta = RESYNC_AFTER,
    ) -> None:
        if hold <= timedelta(0):
            raise ValueError("hold must be positive")
        self.name = name
        self.hold = hold
        self.capacity = capacity
        self.mapping = mapping or AlertMapping()
        self.resync_after = resync_after
        self._api = api
        self._last_poll: datetime | None = None
        self._firing: dict[str, tuple[Signal, datetime]] = {}  # key → (signal, last notified)
        self._lock = threading.Lock()
        self._health = HealthTracker(name)
        self._expired = 0

    def close(self) -> None:
        if self._api is not None:
            self._api.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._firing)

    def record(self, batch: AlertBatch, now: datetime) -> None:
        """One webhook's news: firing alerts are (re)started, resolved ones end. The newest
        alerts win a full table: an old alert is the one most likely to have ended unseen."""
        with self._lock:
            for key in batch.resolved_keys:
                self._firing.pop(key, None)
            for key, signal in batch.firing:
                self._firing.pop(key, None)
                self._firing[key] = (signal, now)
            while len(self._firing) > self.capacity:
                del self._firing[next(iter(self._firing))]

    def poll(self, now: datetime) -> SourceResult:
        """The held alerts, stamped `now`. The first poll of a leader (or one after a pause in
        polling longer than `resync_after`: this replica did not lead) reads Alertmanager's API
        first, when it has one."""
        last, self._last_poll = self._last_poll, None
        if self._api is not None and (last is None or now - last > self.resync_after):
            try:
                alerts = self._api.firing()
            except RemediatorError as exc:
                return self._health.down(now, f"cannot read the alerts Alertmanager fires: {exc}")
            batch = map_alerts(alerts, self.mapping, now, self.name)
            with self._lock:
                self._firing = {}
            self.record(batch, now)
        self._last_poll = now
        with self._lock:
            stale = [k for k, (_, seen) in self._firing.items() if now - seen > self.hold]
            for key in stale:
                del self._firing[key]
            self._expired += len(stale)
            held = [signal for signal, _ in self._firing.values()]
            detail = {"firing": str(len(held)), "expired_total": str(self._expired)}
        signals = tuple(s.at(now) for s in held if s.since is None or s.since <= now)
        return self._health.ok(now, signals, detail)
