"""Server-side printing: the cells real kubectl shows, from the same object fields."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from remediator.sim.kube.api.tables import column_definitions, human_duration, table_row

NOW = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (150, "2m30s"),
        (180, "3m"),
        (3000, "50m"),
        (4 * 3600 + 60, "4h1m"),
        (20 * 3600, "20h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (3 * 365 * 86400, "3y"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_node_row_shows_cordon_and_roles() -> None:
    node = {
        "metadata": {
            "name": "gpu-1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"node-role.kubernetes.io/gpu": ""},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "nodeInfo": {"kubeletVersion": "v1.32.4"},
        },
    }
    row = table_row("nodes", node, NOW, "Metadata", "v1", "Node")
    assert row["cells"][:6] == [
        "gpu-1",
        "Ready,SchedulingDisabled",
        "gpu",
        "24h",
        "v1.32.4",
        "10.0.0.1",
    ]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert [c["name"] for c in column_definitions("nodes") if c["priority"] == 0] == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
    ]


def test_pod_row_terminating_and_restarts() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "creationTimestamp": "2026-01-01T23:00:00Z",
            "deletionTimestamp": "2026-01-01T23:59:00Z",
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "c"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.1.0.5",
            "containerStatuses": [
                {
                    "ready": True,
                    "restartCount": 2,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"finishedAt": "2026-01-01T23:55:00Z"}},
                }
            ],
        },
    }
    cells = table_row("pods", pod, NOW, "None", "v1", "Pod")["cells"]
    assert cells[:7] == ["p", "1/1", "Terminating", "2 (5m ago)", "60m", "10.1.0.5", "gpu-1"]


def test_pdb_row_and_object_inclusion() -> None:
    pdb = {
        "metadata": {"name": "b", "creationTimestamp": "2026-01-01T23:59:30Z"},
        "spec": {"minAvailable": 1},
        "status": {"disruptionsAllowed": 0},
    }
    row = table_row(
        "policy/poddisruptionbudgets", pdb, NOW, "Object", "policy/v1", "PodDisruptionBudget"
    )
    assert row["cells"] == ["b", "1", "N/A", 0, "30s"]
    assert row["object"]["kind"] == "PodDisruptionBudget"
