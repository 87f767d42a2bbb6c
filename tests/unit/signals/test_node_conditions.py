from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from remediator.kube.objects import Node
from remediator.signals.model import SignalKind
from remediator.signals.sources.node_conditions import (
    NodeConditionConfig,
    NodeConditionSource,
    node_signals,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def cond(ctype: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2025-12-31T23:00:00Z",
    }


def node(name: str, *conditions: dict[str, Any]) -> Node:
    return Node.from_json({"metadata": {"name": name}, "status": {"conditions": list(conditions)}})


HEALTHY = (
    cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
    cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
    cond("PIDPressure", "False", "KubeletHasSufficientPID"),
    cond("KernelDeadlock", "False", "KernelHasNoDeadlock"),
    cond("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def test_healthy_fleet_has_no_signals() -> None:
    nodes = [node(f"n{i}", *HEALTHY) for i in range(5)]
    assert node_signals(nodes, NodeConditionConfig(), "nodes", NOW) == []


def test_not_ready_unknown_and_problem_conditions() -> None:
    nodes = [
        node("a", *HEALTHY[:-1], cond("Ready", "False", "KubeletNotReady", "PLEG is not healthy")),
        node("b", *HEALTHY[:-1], cond("Ready", "Unknown", "NodeStatusUnknown")),
        node(
            "c", cond("KernelDeadlock", "True", "DockerHung", "task docker:7 blocked"), HEALTHY[-1]
        ),
    ]
    found = node_signals(nodes, NodeConditionConfig(), "nodes", NOW)
    assert [(s.node, s.labels["type"], s.labels["status"]) for s in found] == [
        ("a", "Ready", "False"),
        ("b", "Ready", "Unknown"),
        ("c", "KernelDeadlock", "True"),
    ]
    assert all(s.kind is SignalKind.NODE_CONDITION and s.code == 1 for s in found)
    assert found[0].labels["reason"] == "KubeletNotReady"
    assert found[0].labels["message"] == "PLEG is not healthy"
    assert found[2].labels["last_transition_time"] == "2025-12-31T23:00:00Z"


def test_configured_types_only_and_ignored_types() -> None:
    nodes = [
        node(
            "a",
            cond("MemoryPressure", "True"),
            cond("GpuXid", "True", "XID79"),
            cond("Ready", "False"),
        )
    ]
    only = NodeConditionConfig(condition_types=frozenset({"GpuXid", "Ready"}))
    assert [s.labels["type"] for s in node_signals(nodes, only, "n", NOW)] == ["GpuXid", "Ready"]
    ignoring = NodeConditionConfig(ignore_types=frozenset({"MemoryPressure"}))
    assert [s.labels["type"] for s in node_signals(nodes, ignoring, "n", NOW)] == [
        "GpuXid",
        "Ready",
    ]


def test_kernel_xid_message_is_decoded_into_labels() -> None:
    message = "NVRM: Xid (PCI:0000:18:00): 79, pid=77, name=python, GPU has fallen off the bus."
    (signal,) = node_signals(
        [node("a", cond("GpuXid", "True", "XID79", message))], NodeConditionConfig(), "n", NOW
    )
    assert (signal.labels["xid"], signal.labels["pci"]) == ("79", "0000:18:00")


def test_odd_objects_are_skipped() -> None:
    nodes = [
        Node.from_json({}),
        Node.from_json({"metadata": {}}),
        Node.from_json({"metadata": {"name": "x"}}),
        Node.from_json({"metadata": {"name": "y"}, "status": {"conditions": None}}),
        node("z", {"status": "True"}),
    ]
    assert node_signals(nodes, NodeConditionConfig(), "n", NOW) == []


def test_a_node_name_out_of_bounds_is_refused_with_the_reason_and_the_rest_go_on() -> None:
    """Problem 6 at the node-condition source: one bad object must not break the poll."""
    nodes = [
        node("Bad_Name", cond("Ready", "False", "KubeletNotReady")),
        node("gpu-a", cond("Ready", "False", "KubeletNotReady")),
    ]
    refused: list[str] = []
    signals = node_signals(nodes, NodeConditionConfig(), "n", NOW, refused)
    assert [s.node for s in signals] == ["gpu-a"]
    (reason,) = refused
    assert reason.startswith("node 'Bad_Name' condition Ready:")
    assert "not a Kubernetes node name" in reason


class Cache:
    """A node cache's answer: the same Node objects until one is replaced."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        return list(self.nodes)


class Judging(NodeConditionSource):
    """The source, noting which nodes it judged."""

    def __init__(self, cache: Cache) -> None:
        super().__init__(cache)
        self.judged: list[str] = []

    def _may_speak(self, node: Node, taint: str | None) -> bool:
        self.judged.append(node.name)
        return super()._may_speak(node, taint)


def test_the_source_judges_only_changed_nodes_and_says_what_a_full_judging_says() -> None:
    healthy = [node(f"gpu-{i}", *HEALTHY) for i in range(4)]
    cache = Cache(healthy)
    source = Judging(cache)
    judged = source.judged
    assert source.poll(NOW).signals == ()
    assert sorted(judged) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]

    judged.clear()
    sick = node("gpu-2", cond("Ready", "False", "KubeletNotReady"))
    cache.nodes = [healthy[0], healthy[1], sick, healthy[3], node("gpu-9", *HEALTHY)]
    first = source.poll(NOW).signals
    assert sorted(judged) == ["gpu-2", "gpu-9"]  # the changed one and the new one
    assert first == tuple(node_signals(cache.nodes, NodeConditionConfig(), "nodes", NOW))
    assert [(s.node, s.labels["type"]) for s in first] == [("gpu-2", "Ready")]

    judged.clear()
    assert source.poll(NOW).signals == first  # unchanged: said again, judged by nobody
    assert judged == []


def test_a_new_startup_taint_judges_every_node_again() -> None:
    tainted = Node.from_json(
        {
            "metadata": {"name": "gpu-new"},
            "spec": {"taints": [{"key": "remediator.io/unvalidated", "effect": "NoSchedule"}]},
            "status": {"conditions": list(HEALTHY)},
        }
    )
    source = NodeConditionSource(Cache([node("gpu-0", *HEALTHY), tainted]))
    assert source.poll(NOW).signals == ()
    source.startup_taint = "remediator.io/unvalidated"
    (signal,) = source.poll(NOW).signals
    assert (signal.node, signal.kind) == ("gpu-new", SignalKind.UNVALIDATED)
