"""Slurm as a signal source: nodes that Slurm (or NHC through its HealthCheckProgram, or an
admin) set DOWN, DRAIN or FAIL with a reason that is not remediator's own become `slurm_node`
signals on the matching Kubernetes node, for policies to match.

Labels: `state` (down, drain or fail: the most severe), `flags` (Slurm's, e.g. IDLE+DRAIN),
`reason` (verbatim: "Not responding", "Kill task failed", "NHC: check_fs_mount: …") and
`reason_prefix` (the text before the first colon, e.g. "NHC"), `slurm_node`. The source is
down, with the reason, when slurmctld does not answer: never a false "healthy".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from remediator.errors import RemediatorError
from remediator.kube.objects import Node
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import HealthTracker, SourceResult
from remediator.slurm.client import SlurmClient, SlurmNode
from remediator.slurm.settings import SlurmSettings

OUR_REASON = "remediator #"


def slurm_name(node: Node, settings: SlurmSettings) -> str:
    """The Slurm node of a Kubernetes node: its label when set, else the template."""
    if settings.node_label and node.labels.get(settings.node_label):
        return node.labels[settings.node_label]
    return settings.node_template.format(name=node.name)


def severity(node: SlurmNode) -> str | None:
    if node.down:
        return "down"
    if "FAIL" in node.flags:
        return "fail"
    if node.drained:
        return "drain"
    return None


def slurm_signals(
    nodes: Iterable[SlurmNode], hosts: Mapping[str, str], source: str, now: datetime
) -> list[Signal]:
    """Pure: fenced Slurm nodes with a foreign reason → signals on their Kubernetes nodes."""
    signals = []
    for node in nodes:
        state = severity(node)
        host = hosts.get(node.name)
        if state is None or host is None or node.reason.startswith(OUR_REASON):
            continue
        labels = {
            "state": state,
            "flags": "+".join([node.state.upper(), *node.flags]),
            "reason": node.reason,
            "reason_prefix": node.reason.split(":", 1)[0].strip(),
            "slurm_node": node.name,
        }
        signals.append(
            Signal(
                node=host, kind=SignalKind.SLURM_NODE, source=source, observed_at=now, labels=labels
            )
        )
    return signals


class SlurmNodeSource:
    name = "slurm"

    def __init__(
        self, client: SlurmClient, settings: SlurmSettings, kube_nodes: Callable[[], list[Node]]
    ) -> None:
        self._client = client
        self._settings = settings
        self._kube_nodes = kube_nodes
        self._health = HealthTracker(self.name)

    def poll(self, now: datetime) -> SourceResult:
        try:
            hosts = {slurm_name(n, self._settings): n.name for n in self._kube_nodes()}
            nodes = self._client.nodes()
        except RemediatorError as exc:
            return self._health.down(now, str(exc))
        signals = tuple(slurm_signals(nodes, hosts, self.name, now))
        return self._health.ok(now, signals, {"nodes": str(len(nodes))})
