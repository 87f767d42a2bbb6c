"""Kubernetes node conditions (node-problem-detector style) → `node_condition` signals.

One read of the node list per cycle, never a call per node: the controller hands it its node
cache (kube/informer.py, one LIST and a watch), or a KubeClient for a LIST per cycle. A
condition is abnormal when Ready is not True (False or Unknown: the kubelet
stopped reporting) or when any other condition is True (MemoryPressure, a problem-detector
condition such as KernelDeadlock or an XID condition). Which types count is configurable. If the
API server cannot be reached the source is down and says so; it never reports an empty cluster
as a healthy one.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from remediator.errors import RemediatorError, TransientError
from remediator.kube.objects import Node, format_time
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import HealthTracker, SourceResult
from remediator.signals.xid import parse_kernel_line

READY = "Ready"


class NodeConditionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # None: every condition type counts; else only these (Ready included only if listed).
    condition_types: frozenset[str] | None = None
    ignore_types: frozenset[str] = frozenset()
    label_selector: str | None = None


class NodeLister(Protocol):
    """What the source needs of remediator.kube.client.KubeClient (its timeout bounds the LIST)."""

    def list_nodes(self, label_selector: str | None = None) -> list[Node]: ...


def is_abnormal(condition_type: str, status: str) -> bool:
    if condition_type == READY:
        return status != "True"
    return status == "True"


def counts(condition_type: str, config: NodeConditionConfig) -> bool:
    if condition_type in config.ignore_types:
        return False
    return config.condition_types is None or condition_type in config.condition_types


def node_signals(
    nodes: Iterable[Node],
    config: NodeConditionConfig,
    source: str,
    now: datetime,
    refused: list[str] | None = None,
) -> list[Signal]:
    """Pure: nodes → one signal per abnormal, counted condition. A condition that cannot be a
    signal (out of bounds: see signals.bounds) is skipped and its reason appended to `refused`;
    the other nodes' conditions go on."""
    signals: list[Signal] = []
    for node in nodes:
        if not node.name:
            continue
        for condition in node.conditions:
            ctype, status = condition.type, condition.status
            if not ctype or not counts(ctype, config) or not is_abnormal(ctype, status):
                continue
            labels = {
                "type": ctype,
                "status": status,
                "reason": condition.reason,
                "message": condition.message,
            }
            if condition.last_transition is not None:
                labels["last_transition_time"] = format_time(condition.last_transition)
            kernel = parse_kernel_line(condition.message)
            if kernel is not None:
                labels |= {"xid": str(kernel.code), "pci": kernel.pci}
            try:
                signal = Signal(
                    node=node.name,
                    kind=SignalKind.NODE_CONDITION,
                    source=source,
                    observed_at=now,
                    code=1,
                    labels=labels,
                )
            except ValidationError as exc:
                if refused is not None:
                    why = "; ".join(err["msg"] for err in exc.errors())
                    refused.append(f"node {node.name[:80]!r} condition {ctype[:80]}: {why}")
                continue
            signals.append(signal)
    return signals


def unvalidated_signals(
    nodes: Iterable[Node], startup_taint: str, source: str, now: datetime
) -> list[Signal]:
    """Pure: one `unvalidated` signal per node still carrying the startup taint (key `startup_
    taint`). The intake leaves out the machines a replacement brought (their remediation
    validates them); the rest joined by themselves and get a validation of their own."""
    return [
        Signal(
            node=node.name,
            kind=SignalKind.UNVALIDATED,
            source=source,
            observed_at=now,
            labels={"taint": startup_taint, "ready": "true" if node.ready else "false"},
        )
        for node in nodes
        if node.name and any(t.key == startup_taint for t in node.taints)
    ]


class NodeConditionSource:
    def __init__(
        self, kube: NodeLister, config: NodeConditionConfig | None = None, name: str = "nodes"
    ) -> None:
        self.name = name
        self.config = config or NodeConditionConfig()
        self._kube = kube
        self._health = HealthTracker(name)
        # Every node of the last poll's LIST (None after a failed or label-filtered one), so
        # the controller builds its inventory from the same LIST instead of a second one.
        self.all_nodes: list[Node] | None = None
        # The key of the policy settings' startup_taint (set by the controller), if any.
        self.startup_taint: str | None = None
        # node name → (the Node last read, whether it has anything to say), and the startup
        # taint that was judged for: a node cache hands out the same Node until it changes.
        self._said: dict[str, tuple[Node, bool]] = {}
        self._said_for: str | None = None

    def poll(self, now: datetime) -> SourceResult:
        self.all_nodes = None
        try:
            nodes = self._kube.list_nodes(self.config.label_selector)
        except TransientError as exc:
            return self._health.down(now, f"Kubernetes API unreachable or unavailable: {exc}")
        except RemediatorError as exc:
            return self._health.down(now, f"Kubernetes API refused LIST nodes: {exc}")
        if self.config.label_selector is None:
            self.all_nodes = nodes
        refused: list[str] = []
        speaking = self._speaking(nodes)
        signals = node_signals(speaking, self.config, self.name, now, refused)
        if self.startup_taint:
            signals += unvalidated_signals(speaking, self.startup_taint, self.name, now)
        detail = {"nodes": str(len(nodes))}
        if refused:
            detail |= {"refused": str(len(refused)), "refused_example": refused[0]}
        return self._health.ok(now, tuple(signals), detail)

    def _speaking(self, nodes: list[Node]) -> list[Node]:
        """The nodes with an abnormal counted condition or the startup taint, in list order.
        Only a Node not seen at the last poll is judged again: at 10,000 healthy nodes the
        judging was ~10 ms a poll, for the few nodes that have something to say."""
        taint = self.startup_taint
        if taint != self._said_for:
            self._said, self._said_for = {}, taint
        said, fresh, speaking = self._said, {}, []
        for node in nodes:
            entry = said.get(node.name)
            if entry is None or entry[0] is not node:
                entry = (node, self._may_speak(node, taint))
            fresh[node.name] = entry
            if entry[1]:
                speaking.append(node)
        self._said = fresh
        return speaking

    def _may_speak(self, node: Node, taint: str | None) -> bool:
        if taint and any(t.key == taint for t in node.taints):
            return True
        return any(
            c.type and counts(c.type, self.config) and is_abnormal(c.type, c.status)
            for c in node.conditions
        )
