from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from remediator.signals.model import SignalKind
from remediator.signals.sources.alertmanager import (
    AlertMapping,
    PayloadError,
    Webhook,
    map_webhook,
    parse_webhook,
)
from tests.unit.signals.alertmanager_payloads import FIRING_XID, resolved

NOW = datetime(2026, 1, 1, 10, 16, tzinfo=UTC)


def one_alert(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    payload = copy.deepcopy(FIRING_XID)
    payload["alerts"] = [
        {
            "status": "firing",
            "labels": labels,
            "annotations": annotations or {},
            "startsAt": "2026-01-01T10:15:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "",
            "fingerprint": "0000000000000001",
        }
    ]
    return payload


def test_firing_group_maps_xid_and_thermal_and_ignores_the_rest() -> None:
    batch = map_webhook(parse_webhook(FIRING_XID), AlertMapping(), NOW)
    xid, thermal = batch.signals
    assert (xid.node, xid.gpu, xid.kind, xid.code) == ("gpu-node-7", 3, SignalKind.XID, 79)
    assert xid.gpu_uuid == "GPU-9b1e2f5e-0d7a-4c43-8f0e-7a1f2b3c4d5e"
    assert xid.observed_at == NOW and xid.source == "alertmanager"
    assert xid.labels["alert_fingerprint"] == "1a30ba71cca2921f"
    assert xid.labels["err_msg"] == "GPU has fallen off the bus"
    assert (thermal.node, thermal.gpu, thermal.kind, thermal.value) == (
        "gpu-node-2",
        0,
        SignalKind.THERMAL,
        81.0,
    )
    assert batch.resolved == 0
    assert len(batch.ignored) == 1 and "Watchdog" in batch.ignored[0]


def test_resolved_alerts_yield_no_signals() -> None:
    batch = map_webhook(parse_webhook(resolved(FIRING_XID)), AlertMapping(), NOW)
    assert batch.signals == ()
    assert batch.resolved == 3
    assert batch.ignored == ()


def test_explicit_kind_label_wins_over_alertname() -> None:
    payload = one_alert(
        {"alertname": "GPUHighTemperature", "remediator_kind": "nvlink", "node": "n1", "gpu": "2"}
    )
    (signal,) = map_webhook(parse_webhook(payload), AlertMapping(), NOW).signals
    assert signal.kind is SignalKind.NVLINK and signal.node == "n1"


def test_custom_mapping() -> None:
    mapping = AlertMapping(
        alertnames={"DCGMXid": SignalKind.XID}, node_labels=("kubernetes_node",), code_labels=("x",)
    )
    payload = one_alert({"alertname": "DCGMXid", "kubernetes_node": "n9", "x": "48"})
    (signal,) = map_webhook(parse_webhook(payload), mapping, NOW).signals
    assert (signal.node, signal.code, signal.gpu) == ("n9", 48, None)


def test_fixed_code_from_alertname() -> None:
    payload = one_alert({"alertname": "GPUFellOffTheBus", "node": "n1", "gpu": "0"})
    (signal,) = map_webhook(parse_webhook(payload), AlertMapping(), NOW).signals
    assert (signal.kind, signal.code) == (SignalKind.XID, 79)


def test_xid_code_read_from_a_kernel_log_line() -> None:
    payload = one_alert(
        {"alertname": "GPUXidError", "node": "n1"},
        {"message": "NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=x, DBE detected"},
    )
    (signal,) = map_webhook(parse_webhook(payload), AlertMapping(), NOW).signals
    assert signal.code == 48 and signal.labels["pci"] == "0000:18:00"


def test_node_condition_alert_gets_code_one() -> None:
    payload = one_alert({"alertname": "NodeProblem", "node": "n1", "reason": "KernelDeadlock"})
    (signal,) = map_webhook(parse_webhook(payload), AlertMapping(), NOW).signals
    assert (signal.kind, signal.code) == (SignalKind.NODE_CONDITION, 1)


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ({"alertname": "GPUXidError", "gpu": "1"}, "no node label"),
        ({"alertname": "GPUXidError", "node": "n1"}, "without an XID code"),
        ({"alertname": "GPUXidError", "node": "n1", "xid": "79", "gpu": "x"}, "not a GPU index"),
        ({"alertname": "X", "remediator_kind": "bogus", "node": "n1"}, "unknown remediator_kind"),
        ({"alertname": "SomethingElse", "node": "n1"}, "not mapped"),
    ],
)
def test_alerts_that_cannot_be_signals_are_ignored_with_a_reason(
    labels: dict[str, str], reason: str
) -> None:
    batch = map_webhook(parse_webhook(one_alert(labels)), AlertMapping(), NOW)
    assert batch.signals == ()
    assert len(batch.ignored) == 1 and reason in batch.ignored[0]


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda p: p.update(version="3"), "unsupported webhook payload version '3'"),
        (lambda p: p.pop("version"), "unsupported webhook payload version None"),
        (lambda p: p.pop("alerts"), "alerts: Field required"),
        (lambda p: p["alerts"][0].update(status="pending"), "alerts.0.status"),
        (lambda p: p["alerts"][0].update(startsAt="yesterday"), "alerts.0.startsAt"),
        (lambda p: p["alerts"][0].update(labels=["a"]), "alerts.0.labels"),
    ],
)
def test_malformed_payloads_are_rejected_with_reasons(mutate: Any, reason: str) -> None:
    payload = copy.deepcopy(FIRING_XID)
    mutate(payload)
    with pytest.raises(PayloadError) as caught:
        parse_webhook(payload)
    assert any(reason in r for r in caught.value.reasons), caught.value.reasons


@pytest.mark.parametrize("body", [None, [], "x", 4])
def test_non_object_bodies_are_rejected(body: Any) -> None:
    with pytest.raises(PayloadError, match="JSON object"):
        parse_webhook(body)


def test_payload_from_an_older_alertmanager_without_fingerprint_is_accepted() -> None:
    payload = copy.deepcopy(FIRING_XID)
    for alert in payload["alerts"]:
        del alert["fingerprint"]
    del payload["truncatedAlerts"]
    assert len(map_webhook(parse_webhook(payload), AlertMapping(), NOW).signals) == 2


def test_a_firing_alert_is_a_state_since_its_start() -> None:
    """Problem 3: an alert is a breach that began at startsAt, not one reading at arrival."""
    batch = map_webhook(parse_webhook(FIRING_XID), AlertMapping(), NOW)
    xid, thermal = batch.signals
    assert xid.since == datetime(2026, 1, 1, 10, 15, 26, 739266, tzinfo=UTC)
    assert thermal.since == datetime(2026, 1, 1, 10, 14, tzinfo=UTC)
    assert [key for key, _ in batch.firing] == ["1a30ba71cca2921f", "bc97ff14869b13e3"]


def test_the_rules_for_is_part_of_the_breach() -> None:
    payload = one_alert(
        {"alertname": "GPUHighTemperature", "node": "gpu-1", "gpu": "0"},
        {"value": "83", "for": "1m30s"},
    )
    (signal,) = map_webhook(parse_webhook(payload), AlertMapping(), NOW).signals
    assert signal.since == datetime(2026, 1, 1, 10, 13, 30, tzinfo=UTC)
    assert signal.value == 83.0


def test_a_start_ahead_of_our_clock_is_taken_as_now() -> None:
    payload = one_alert({"alertname": "GPUHighTemperature", "node": "gpu-1"})
    payload["alerts"][0]["startsAt"] = "2026-01-01T10:30:00Z"
    (signal,) = map_webhook(parse_webhook(payload), AlertMapping(), NOW).signals
    assert signal.since == NOW


@pytest.mark.parametrize(
    ("labels", "annotations", "words"),
    [
        ({"xid": "100000000000000000000"}, {}, "outside 1..65535"),
        ({"gpu": "4096"}, {}, "less than or equal to 1023"),
        ({"node": "GPU_Node_1"}, {}, "not a Kubernetes node name"),
        ({"alertname": "GPUHighTemperature", "xid": ""}, {"value": "NaN"}, "not a finite"),
        ({"alertname": "GPUHighTemperature", "xid": ""}, {"value": "+Inf"}, "not a finite"),
        ({"alertname": "GPUHighTemperature", "xid": ""}, {"value": "hot"}, "not a number"),
        ({}, {"for": "soon"}, "not a Prometheus duration"),
        ({}, {"for": "99999999999y"}, "not a Prometheus duration"),
    ],
)
def test_out_of_bounds_alerts_are_ignored_with_the_reason_and_the_rest_go_on(
    labels: dict[str, str], annotations: dict[str, str], words: str
) -> None:
    """Problem 6 through the webhook: each bad alert is refused alone, with its reason."""
    payload = one_alert(
        {"alertname": "GPUXidError", "node": "gpu-1", "xid": "79", **labels}, annotations
    )
    payload["alerts"].append(copy.deepcopy(FIRING_XID["alerts"][0]))
    batch = map_webhook(parse_webhook(payload), AlertMapping(), NOW)
    assert [s.node for s in batch.signals] == ["gpu-node-7"]
    (reason,) = batch.ignored
    assert words in reason, reason


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda p: p.update(groupKey=""), "groupKey"),
        (lambda p: p.update(truncatedAlerts=False), "truncatedAlerts"),
        (lambda p: p["alerts"][0].update(startsAt=1767268770), "startsAt"),
    ],
)
def test_what_alertmanager_never_sends_is_refused(mutate: Any, words: str) -> None:
    """#39 item 23: Alertmanager always sends a group key (notify/webhook: `{}:{…}`) and a count
    for `truncatedAlerts`; an empty key, `false` and a number for a time were taken."""
    payload = copy.deepcopy(FIRING_XID)
    mutate(payload)
    with pytest.raises(PayloadError) as caught:
        parse_webhook(payload)
    assert any(words in r for r in caught.value.reasons), caught.value.reasons
    schema = Webhook.model_json_schema()
    assert schema["properties"]["groupKey"]["minLength"] == 1
    assert "groupKey" in schema["required"]
