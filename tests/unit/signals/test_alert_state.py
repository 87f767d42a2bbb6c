"""Firing alerts held between Alertmanager's notifications."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.signals.sources.alert_state import FiringAlerts
from remediator.signals.sources.alertmanager import (
    AlertBatch,
    AlertMapping,
    map_webhook,
    parse_webhook,
)
from remediator.signals.sources.alertmanager_api import AlertmanagerAPI
from tests.fixtures.prometheus import free_port
from tests.unit.signals.alertmanager_payloads import FIRING_XID, resolved

NOW = datetime(2026, 1, 1, 10, 16, tzinfo=UTC)


def batch(payload: dict[str, Any], now: datetime = NOW) -> AlertBatch:
    return map_webhook(parse_webhook(payload), AlertMapping(), now)


def test_a_firing_alert_is_announced_at_every_poll_until_resolved() -> None:
    alerts = FiringAlerts()
    alerts.record(batch(FIRING_XID), NOW)
    later = NOW + timedelta(minutes=3)
    polled = alerts.poll(later).signals
    assert sorted(s.node for s in polled) == ["gpu-node-2", "gpu-node-7"]
    assert all(s.observed_at == later for s in polled)
    thermal = next(s for s in polled if s.node == "gpu-node-2")
    assert thermal.since == datetime(2026, 1, 1, 10, 14, tzinfo=UTC)

    alerts.record(batch(resolved(FIRING_XID)), later)
    assert alerts.poll(later + timedelta(seconds=15)).signals == ()
    assert len(alerts) == 0


def test_only_the_resolved_alert_of_a_group_ends() -> None:
    alerts = FiringAlerts()
    alerts.record(batch(FIRING_XID), NOW)
    partial = copy.deepcopy(FIRING_XID)
    partial["alerts"][1]["status"] = "resolved"
    alerts.record(batch(partial), NOW + timedelta(minutes=1))
    assert [s.node for s in alerts.poll(NOW + timedelta(minutes=2)).signals] == ["gpu-node-7"]


def test_an_alert_not_re_sent_within_the_hold_is_dropped() -> None:
    alerts = FiringAlerts(hold=timedelta(hours=4, minutes=30))
    alerts.record(batch(FIRING_XID), NOW)
    assert len(alerts.poll(NOW + timedelta(hours=4)).signals) == 2
    alerts.record(batch(FIRING_XID), NOW + timedelta(hours=4))  # the repeat_interval re-send
    assert len(alerts.poll(NOW + timedelta(hours=8)).signals) == 2
    result = alerts.poll(NOW + timedelta(hours=8, minutes=31))
    assert result.signals == ()
    assert result.health.detail["expired_total"] == "2"


def test_without_its_alertmanager_a_new_leader_says_so_and_tries_again() -> None:
    """The resync is the only way a new leader learns of alerts notified before it led: when
    Alertmanager cannot be read the source is down with the reason, and the next poll retries."""
    port = free_port()  # nothing listens there
    alerts = FiringAlerts(api=AlertmanagerAPI(f"http://127.0.0.1:{port}", timeout_seconds=2))
    result = alerts.poll(NOW)
    assert not result.health.up
    assert result.health.error is not None
    assert result.health.error.startswith("cannot read the alerts Alertmanager fires:")
    assert not alerts.poll(NOW + timedelta(seconds=15)).health.up  # retried, still down
    alerts.close()
