"""What the console needs from the rest of the controller, passed in whole by the composition
root (the controller builds a WebDeps and calls `create_app`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry

from remediator.clock import Clock, SystemClock
from remediator.errors import PolicyError
from remediator.fences.owner import FenceOwner
from remediator.kube.agent_pods import AgentPods
from remediator.kube.objects import Node, Pod
from remediator.ledger.sightings import HardwareSightings
from remediator.policy.loader import PolicySet
from remediator.settings import Settings
from remediator.signals.admission import Admission
from remediator.signals.sources.push import NodeGpus, SignalInbox
from remediator.store.heartbeats import HeartbeatBook
from remediator.store.repository import Repository


class PolicyView(Protocol):
    """The active policy set and the error of the newest refused load (PolicyStore fits)."""

    active: PolicySet | None
    last_error: PolicyError | None


def _never_leader() -> bool:
    return False


def _cluster_unchecked() -> str | None:
    return None


def _no_extra_series() -> bytes:
    return b""


def _nothing_to_refresh() -> None:
    return None


def _cannot_say(_node: str) -> bool | None:
    return None


def _cannot_list(_nodes: Sequence[str]) -> Mapping[str, int | None] | None:
    return None


@dataclass
class WebDeps:
    """`check_cluster` is asked only while `is_leader()`: it returns why the cluster API cannot
    be reached, or None when it can. `read_node` reads a node from the cluster (None: no such
    node; raises RemediatorError when the cluster cannot say); left None, the node page says
    the console has no cluster access. `runbooks_dir` None means: find runbooks/."""

    settings: Settings
    repository: Repository
    policies: PolicyView
    inbox: SignalInbox
    registry: CollectorRegistry
    is_leader: Callable[[], bool] = _never_leader
    check_cluster: Callable[[], str | None] = _cluster_unchecked
    clock: Clock = field(default_factory=SystemClock)
    runbooks_dir: Path | None = None
    read_node: Callable[[str], Node | None] | None = None
    # Called before /metrics answers: gauges read from the store are set when someone looks.
    before_scrape: Callable[[], None] = _nothing_to_refresh
    # Exposition text /metrics appends to the registry's (series too many for the registry's
    # own formatting: every agent's).
    scrape_extra: Callable[[], bytes] = _no_extra_series
    # Agents' heartbeats in memory, written coalesced; None: create_app keeps its own.
    heartbeats: HeartbeatBook | None = None
    # The hardware agents name in heartbeats, written with the book's flush (ledger/sightings.py);
    # None with a book given: not recorded; with none, create_app keeps its own with its book.
    hardware: HardwareSightings | None = None
    # The push path's per-node and per-replica limits; None: create_app builds them from settings.
    admission: Admission | None = None
    # Whether the cluster has this node (the node cache); None when it cannot say yet.
    node_known: Callable[[str], bool | None] = _cannot_say
    # Which of these nodes the cluster has → GPU count (None: not said), for the push path's
    # screen at the door; None when it cannot say yet (then the leader's intake screens).
    node_gpus: NodeGpus = _cannot_list
    # The rack view (web/racks.py): every node (the node cache) and the gang jobs' pods; None:
    # this console has no cluster access.
    list_nodes: Callable[[], list[Node]] | None = None
    list_gang_pods: Callable[[], list[Pod]] | None = None
    # A node → the hold reason of its quarantined machine (remediation/machine_hold.py), so a
    # cancel says which node stays fenced; None: this console cannot tell.
    machine_hold: Callable[[str], str | None] | None = None
    # The fence owner (fences/owner.py): its last pass's view and the operators' commands;
    # None: this console cannot tell. `fences_changed` wakes the leader's pass after a command.
    fences: FenceOwner | None = None
    fences_changed: Callable[[], None] = _nothing_to_refresh
    # The agents' DaemonSet pods as the kubelets report them (kube/agent_pods.py): with them a
    # dead or crash-looping agent is known in seconds; None: liveness from heartbeats alone.
    agent_pods: AgentPods | None = None
