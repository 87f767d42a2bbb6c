"""Alertmanager webhook bodies in the documented version-4 shape, as Alertmanager sends them."""

from __future__ import annotations

import copy
from typing import Any

FIRING_XID: dict[str, Any] = {
    "receiver": "remediator",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {
                "alertname": "GPUXidError",
                "Hostname": "gpu-node-7",
                "gpu": "3",
                "UUID": "GPU-9b1e2f5e-0d7a-4c43-8f0e-7a1f2b3c4d5e",
                "err_code": "79",
                "err_msg": "GPU has fallen off the bus",
                "instance": "10.0.3.7:9400",
                "job": "dcgm-exporter",
                "severity": "critical",
            },
            "annotations": {
                "summary": "XID 79 on gpu-node-7 GPU 3",
                "description": "DCGM reports XID 79 (GPU has fallen off the bus).",
            },
            "startsAt": "2026-01-01T10:15:26.739266876Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS+%21%3D+0",
            "fingerprint": "1a30ba71cca2921f",
        },
        {
            "status": "firing",
            "labels": {
                "alertname": "GPUHighTemperature",
                "Hostname": "gpu-node-2",
                "gpu": "0",
                "severity": "warning",
                "value": "81",
            },
            "annotations": {"summary": "GPU 0 on gpu-node-2 is at 81 °C"},
            "startsAt": "2026-01-01T10:14:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_GPU_TEMP+%3E+78",
            "fingerprint": "bc97ff14869b13e3",
        },
        {
            "status": "firing",
            "labels": {"alertname": "Watchdog", "severity": "none"},
            "annotations": {"description": "This alert is always firing."},
            "startsAt": "2026-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=vector%281%29",
            "fingerprint": "e5f2a1b0c9d8e7f6",
        },
    ],
    "groupLabels": {"severity": "critical"},
    "commonLabels": {},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "version": "4",
    "groupKey": '{}/{severity=~"critical|warning"}:{severity="critical"}',
    "truncatedAlerts": 0,
}


def resolved(payload: dict[str, Any]) -> dict[str, Any]:
    """The same group once every alert has resolved."""
    out = copy.deepcopy(payload)
    out["status"] = "resolved"
    for alert in out["alerts"]:
        alert["status"] = "resolved"
        alert["endsAt"] = "2026-01-01T10:20:26.739266876Z"
    return out
