"""Signals in, remediations out: fold duplicates, store what was seen, evaluate the policies
against the durable history, pass the decisions through the budgets and the storm breaker, and
open a remediation (state `detected`) for each one admitted.

A decision a budget, `max_concurrent`, a pause or the breaker holds back is not lost: it opens a
remediation in state `queued` with the hold's reason, its signals and its policy, and every cycle
(`admit_queued`, and with every batch of signals) the queued ones are offered to the budgets again
in priority order, so one is admitted the moment the budget frees, with no new signal and under
its own cause. A queued node's signals re-announced by a pull source fold into it (the node has
an open remediation, so no policy decides on it again).

The evaluation's streak and burst state live here, on the leader, between cycles. The breaker's
trip and its fault window are in the store, so a restart or a failover mid-storm keeps both, and
only a human resets it (from the console).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial

from remediator.errors import ConflictError, IllegalTransition
from remediator.kube.objects import Node
from remediator.ledger.identity import machine_id
from remediator.ledger.store import Ledger
from remediator.model.states import State
from remediator.model.topology import Topology, build_topology, domain_map
from remediator.policy.budget import (
    Admission,
    BreakerState,
    ClusterState,
    Held,
    HoldCause,
    admit,
)
from remediator.policy.domains_out import Holding, domains_held, unit_nodes
from remediator.policy.durations import format_duration
from remediator.policy.evaluate import (
    Decision,
    EvalState,
    History,
    PastRemediation,
    explain,
)
from remediator.policy.fleet_breaker import fleet_verdict
from remediator.policy.ladder import ladder_from_policy, with_startup_taint
from remediator.policy.loader import PolicySet
from remediator.policy.moments import evaluate_in_order
from remediator.policy.new_machines import admit_new_machines, is_new_machine
from remediator.policy.planned import Moment, admit_planned
from remediator.policy.schema import Policy
from remediator.policy.scope import fold_scopes
from remediator.remediation.journal import log_transition
from remediator.remediation.node_gone import REPLACEMENT_STATES
from remediator.remediation.planned import (
    PLANNED_ACTION,
    Plan,
    PodAnnotations,
    due,
    events_of,
    hold_text,
    moment_came,
    no_pods,
    plan_moment,
    planned_detail,
    planned_running,
    same_moment,
)
from remediator.remediation.suppression import suppressed_by
from remediator.signals.dedup import SignalFolder
from remediator.signals.model import Signal, SignalKind
from remediator.signals.repeats import StoredRows
from remediator.signals.screen import Dropped, screen
from remediator.signals.sources.node_conditions import is_abnormal
from remediator.store.archive import ArchiveUnavailable, NodeSnapshot, SignalArchive
from remediator.store.fleet_breaker import FleetBreakerStore
from remediator.store.records import (
    ControllerStatus,
    NewRemediation,
    RemediationFilter,
    RemediationRecord,
)
from remediator.store.repository import OpenRemediationExists, Repository
from remediator.store.signal_counts import recount

log = logging.getLogger(__name__)

DEFAULT_FOLD_WINDOW = timedelta(minutes=5)
PAGE = 500


@dataclass(frozen=True)
class Inventory:
    """The cluster's nodes as the budgets and node selectors need them. A node cordoned by
    anyone (maintenance, another tool, a remediation of ours) is out of service like a NotReady
    one: the budgets bound how many nodes are out, not only how many we took out."""

    pools: Mapping[str, str] = field(default_factory=dict)  # node → pool ("" when none)
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    not_ready: frozenset[str] = frozenset()
    cordoned: frozenset[str] = frozenset()
    gpus: Mapping[str, int | None] = field(default_factory=dict)  # node → GPU count, if known
    # node → condition type → status, so a queued remediation whose condition cleared can close
    conditions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # node → the machine behind it (ledger/identity.py), when its providerID names one
    machines: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node], pool_label: str) -> Inventory:
        """One pass, labels shared with the (frozen) Node rather than copied."""
        parts = _InventoryParts()
        for n in nodes:
            parts.put(n, pool_label)
        return parts.freeze()

    # What gpu_counts and snapshots derive, kept with this (frozen) inventory: the poll hands
    # the same inventory to every idle cycle, which rebuilt both for 10,000 nodes each time.
    _gpu_counts: dict[str, int | None] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )
    _snapshots: dict[str, NodeSnapshot] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def gpu_counts(self) -> Mapping[str, int | None]:
        """Every node the cluster has → its GPU count (None when unknown)."""
        if not self._gpu_counts:
            self._gpu_counts.update({node: self.gpus.get(node) for node in self.pools})
        return self._gpu_counts

    def snapshots(self) -> Mapping[str, NodeSnapshot]:
        if not self._snapshots:
            self._snapshots.update(
                {
                    node: NodeSnapshot(
                        pool,
                        self.labels.get(node, {}),
                        node not in self.not_ready,
                        node in self.cordoned,
                    )
                    for node, pool in self.pools.items()
                }
            )
        return self._snapshots

    def nodes_per_pool(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pool in self.pools.values():
            counts[pool] = counts.get(pool, 0) + 1
        return counts


@dataclass
class _InventoryParts:
    """An Inventory under construction: one node's entries put or dropped at a time."""

    pools: dict[str, str] = field(default_factory=dict)
    labels: dict[str, Mapping[str, str]] = field(default_factory=dict)
    not_ready: set[str] = field(default_factory=set)
    cordoned: set[str] = field(default_factory=set)
    gpus: dict[str, int | None] = field(default_factory=dict)
    conditions: dict[str, Mapping[str, str]] = field(default_factory=dict)
    machines: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, inventory: Inventory) -> _InventoryParts:
        return cls(
            dict(inventory.pools),
            dict(inventory.labels),
            set(inventory.not_ready),
            set(inventory.cordoned),
            dict(inventory.gpus),
            dict(inventory.conditions),
            dict(inventory.machines),
        )

    def put(self, n: Node, pool_label: str) -> None:
        name = n.name
        self.pools[name] = n.labels.get(pool_label, "")
        self.labels[name] = n.labels
        self.gpus[name] = n.gpus
        states = {c.type: c.status for c in n.conditions}
        self.conditions[name] = states
        if states.get("Ready") != "True":
            self.not_ready.add(name)
        else:
            self.not_ready.discard(name)
        if n.unschedulable:
            self.cordoned.add(name)
        else:
            self.cordoned.discard(name)
        if (machine := machine_id(n.provider_id, n.annotations)) is not None:
            self.machines[name] = machine
        else:
            self.machines.pop(name, None)

    def drop(self, name: str) -> None:
        for entries in (self.pools, self.labels, self.gpus, self.conditions, self.machines):
            entries.pop(name, None)
        self.not_ready.discard(name)
        self.cordoned.discard(name)

    def freeze(self) -> Inventory:
        return Inventory(
            pools=self.pools,
            labels=self.labels,
            not_ready=frozenset(self.not_ready),
            cordoned=frozenset(self.cordoned),
            gpus=self.gpus,
            conditions=self.conditions,
            machines=self.machines,
        )


class InventoryCache:
    """`Inventory.from_nodes` for a loop that rebuilds it every poll from a node cache: only the
    nodes that changed are read again. The cache hands out the same frozen Node for a node until
    an event replaces it, so "changed" is an identity test; an idle fleet then costs one lookup
    per node instead of a rebuild (it was ~20 % of an idle 10,000-node controller's CPU)."""

    def __init__(self, pool_label: str) -> None:
        self._pool_label = pool_label
        # The nodes the last inventory was built from, and it: one pair, read and replaced as
        # one (the poll, the push loop and the queue's admission build from their own threads).
        self._last: tuple[dict[str, Node], Inventory] | None = None

    def build(self, nodes: Sequence[Node]) -> Inventory:
        last = self._last
        seen = last[0] if last is not None else {}
        changed = [n for n in nodes if seen.get(n.name) is not n]
        if last is not None and not changed and len(nodes) == len(seen):
            return last[1]  # the same nodes, every one unchanged
        now = {n.name: n for n in nodes}
        if last is None or len(now) != len(nodes):  # first, or a name twice
            inventory = Inventory.from_nodes(nodes, self._pool_label)
        else:
            parts = _InventoryParts.of(last[1])
            for name in seen.keys() - now.keys():
                parts.drop(name)
            for n in changed:
                parts.put(n, self._pool_label)
            inventory = parts.freeze()
        self._last = (now, inventory)
        return inventory


@dataclass(frozen=True)
class IntakeResult:
    created: tuple[RemediationRecord, ...] = ()  # now in `detected`: new, or admitted from queue
    queued: tuple[RemediationRecord, ...] = ()  # newly queued in this cycle
    closed: tuple[RemediationRecord, ...] = ()  # queued ones whose signals cleared
    breaker_tripped: str | None = None  # the reason, when it tripped in this cycle
    dropped: tuple[Dropped, ...] = ()  # signals the cluster cannot have (signals.screen)
    folded: Mapping[str, int] = field(default_factory=dict)  # duplicates dropped, by source
    # What became of the accepted signals, by class (opened, joined, folded, cooldown, …)
    dispositions: Mapping[str, int] = field(default_factory=dict)
    # Signals held for the next intake: observed after their node's deciding moment
    # (policy/moments.py); the caller runs it once this one's remediations have moved.
    waiting: int = 0


PLANNED = HoldCause.PLANNED.value


@dataclass
class PlannedResult:
    created: list[RemediationRecord] = field(default_factory=list)
    queued: list[RemediationRecord] = field(default_factory=list)
    # id(decision or queued plan) → its urgent moment: handed to the ordinary admission, and
    # said on the timeline of the remediation that admission opens or keeps.
    urgent: dict[int, Moment] = field(default_factory=dict)


def cluster_state(
    inventory: Inventory,
    fencing: Sequence[RemediationRecord],
    scopes: Mapping[str, str] | None = None,
) -> ClusterState:
    """Unhealthy = not Ready, cordoned, or fenced by a remediation that touches the cluster.

    A queued remediation takes no budget: its node's cordon (`while_queued: cordon`) keeps new
    work off but evicts nothing, and counting it would let two queued nodes block each other
    for ever. An opt-out hold counts toward `max_unhealthy` (its node is quarantined, out of
    service for new work) but not toward `max_concurrent`, which bounds work in flight: the hold
    evicts and replaces nothing while it waits for the labelled pods to finish.

    `scopes` (policy → scope) says which remediations hold a whole clique or domain: a queued
    one's cordoned trays take no budget either, and only a domain-scope one takes its domain
    out (policy/domains_out.py)."""
    scope_of = (scopes or {}).get
    domains = domain_map(inventory.labels)
    queued = {
        tray
        for r in fencing
        if r.state is State.QUEUED
        for tray in unit_nodes(r.node, scope_of(r.policy, "node"), domains, inventory.labels)
    }
    # A new machine's validation is no fault: it has its own limit (policy/new_machines.py).
    validating = {r.node for r in fencing if is_new_machine(r.signals)}
    unhealthy: dict[str, set[str]] = {}
    for node in (inventory.not_ready | (inventory.cordoned - queued)) - validating:
        unhealthy.setdefault(inventory.pools.get(node, ""), set()).add(node)
    # A node that left the cluster takes nothing out of service: its remediation never counts
    # toward a budget. A replacement in flight is the exception: its old node goes on purpose
    # and the pool stays one short until the new one is Ready, so it still counts.
    known = inventory.pools
    acting = [
        r
        for r in fencing
        if not r.dry_run
        and r.state is not State.QUEUED
        and r.node not in validating
        and (not known or r.node in known or r.state in REPLACEMENT_STATES)
    ]
    holding: list[Holding] = []
    for record in acting:
        pool = record.pool or inventory.pools.get(record.node, "")
        unhealthy.setdefault(pool, set()).add(record.node)
        holding.append(Holding(record.node, pool, scope_of(record.policy, "node")))
    domains_out, fenced_trays = domains_held(holding, domains, inventory.labels)
    return ClusterState(
        nodes_per_pool=inventory.nodes_per_pool(),
        unhealthy={pool: frozenset(nodes) for pool, nodes in unhealthy.items()},
        open_remediations=sum(1 for r in acting if r.state is not State.HELD_BY_OPT_OUT),
        known=frozenset(inventory.pools) or None,
        domains=domains,
        domains_out=domains_out,
        fenced_trays=fenced_trays,
        domain_policies=frozenset(p for p, scope in (scopes or {}).items() if scope == "domain"),
    )


def members(node: str, scope: str, topology: Topology) -> tuple[str, ...]:
    """The nodes a remediation of `node` under a policy of `scope` holds (policy/scope.py)."""
    place = topology.placement(node)
    if scope == "node" or place is None:
        return (node,)
    if scope == "clique":
        return topology.clique_of(node)
    return topology.domains[place.domain].nodes


def covered(
    fencing: Sequence[RemediationRecord], policies: PolicySet, topology: Topology
) -> dict[str, str]:
    """node → policy of the open remediation holding it: a clique or domain remediation holds
    every tray of its unit, so a later signal from one of them joins it instead of opening
    another. The unit is read from the lead node's labels and the policy's scope today."""
    scopes = {p.name: p.scope for p in policies.policies}
    held: dict[str, str] = {}
    for record in fencing:
        for node in members(record.node, scopes.get(record.policy, "node"), topology):
            held.setdefault(node, record.policy)
    return held


def never_started(record: RemediationRecord) -> bool:
    """Closed while still queued (its signals cleared, or dropped or cancelled by a human): it
    did nothing, so it starts no cooldown and is no repeat. A human's cancel is kept by its own
    `suppressed_until` instead."""
    return record.state is State.CANCELLED and record.queue_cause is not None


def breaker_of(status: ControllerStatus) -> BreakerState:
    """The breaker as stored: its trip and its fault window."""
    return BreakerState(
        status.breaker_tripped,
        status.breaker_tripped_at,
        status.breaker_reason,
        tuple(status.breaker_faults),
    )


def without_brought_machines(
    signals: Sequence[Signal], fencing: Sequence[RemediationRecord], pools: Mapping[str, str]
) -> Sequence[Signal]:
    """A machine a replacement brought carries the startup taint until its remediation's own
    validation passes: it is not a scale-up to validate a second time. Until a replacement
    names its machine (EC2, GCE and Cluster API do once the Node joined), any unclaimed new
    node of that pool may be it, and waits (its signal comes again next poll)."""
    brought = {r.new_node for r in fencing if r.new_node}
    replacing = {r.pool for r in fencing if r.state is State.REPLACING and r.pool}
    return [
        s
        for s in signals
        if s.kind is not SignalKind.UNVALIDATED
        or not (s.node in brought or pools.get(s.node) in replacing)
    ]


def machines_behind(inventory: Inventory, known: Callable[[str], str | None]) -> dict[str, str]:
    """node → the machine behind it now, in the ledger's ids (`known`: Ledger.machine_of), the
    ids its remediations are linked under, so a repeat by machine compares like with like: a
    tray the controller's replacement brought under its slot's providerID is its own machine
    (identity.brought_by), not the tray before it; an agent's DMI serial outranks a providerID.
    The Node's own id only while the ledger has no picture of the node."""
    own = inventory.machines
    return {
        node: machine
        for node in inventory.pools
        if (machine := known(node) or own.get(node)) is not None
    }


def new_remediation(decision: Decision, policies: PolicySet) -> NewRemediation:
    policy = next((p for p in policies.policies if p.name == decision.policy), None)
    return NewRemediation(
        node=decision.node,
        policy=decision.policy,
        reason=decision.reason,
        signals=decision.signals,
        ladder=with_startup_taint(
            ladder_from_policy(decision.actions, decision.on_failure, decision.fallbacks),
            policies.settings.startup_taint,
        ),
        pool=decision.pool or None,
        policy_priority=decision.priority,
        policy_commit=policies.commit,
        policy_hash=policies.content_hash,
        dry_run=decision.dry_run,
        approval_required=decision.approval == "required",
        while_queued=policy.while_queued if policy is not None else "cordon",
    )


class Intake:
    def __init__(
        self,
        repository: Repository,
        *,
        actor: str,
        fold_window: timedelta = DEFAULT_FOLD_WINDOW,
        archive: SignalArchive | None = None,
        pods: PodAnnotations = no_pods,
        fleet: FleetBreakerStore | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self._repo = repository
        self._ledger = ledger
        # The machine behind each node as last handed to the ledger: asking it again about the
        # same machine is a no-op, and 10,000 asks a cycle were an idle cost.
        self._machines_linked: Mapping[str, str] = {}
        self._pods = pods
        self._fleet = fleet
        self._archive = archive
        self._actor = actor
        self._folder = SignalFolder(fold_window)
        self._stored = StoredRows(fold_window)
        self._opened: list[Decision] = []
        self._linked: set[int] = set()  # ids of signals linked to a waiting plan this cycle
        self._eval_state = EvalState()
        self._lock = threading.Lock()
        # This cycle's dispositions: id(signal) → (class, text); written with the signals.
        self._said: dict[int, tuple[str, str]] = {}
        self._opened_on: dict[str, int] = {}  # node → the remediation opened for it this cycle
        self._waiting: tuple[Signal, ...] = ()  # screened and folded, decided next intake

    def process(
        self,
        signals: Sequence[Signal],
        inventory: Inventory,
        policies: PolicySet | None,
        now: datetime,
    ) -> IntakeResult:
        with self._lock:
            return self._process(signals, inventory, policies, now)

    def _process(
        self,
        signals: Sequence[Signal],
        inventory: Inventory,
        policies: PolicySet | None,
        now: datetime,
    ) -> IntakeResult:
        screened = screen(signals, inventory.gpu_counts())
        signals = screened.kept
        if self._ledger is not None:
            signals = self._link_hardware(signals, inventory, now)
        waited = self._take_waiting()
        fresh = (*waited, *self._folder.fold(signals, now))
        kept = {id(s) for s in fresh}
        folded: dict[str, int] = {}
        self._said = {}
        self._opened_on = {}
        for signal in signals:
            if id(signal) not in kept:
                folded[signal.source] = folded.get(signal.source, 0) + 1
                self._said[id(signal)] = ("folded", self._folded_text(signal))
        result = IntakeResult()
        if policies is not None and fresh:
            result = self._decide(fresh, inventory, policies, now)
        elif policies is None:
            for signal in fresh:
                self._said[id(signal)] = ("no_policy", "no policy set loaded")
        classes: dict[str, int] = {}
        for kind, _ in self._said.values():
            classes[kind] = classes.get(kind, 0) + 1
        result = replace(result, folded=folded, dispositions=classes, waiting=len(self._waiting))
        if self._archive is not None:
            # Every signal that passed the screen, before the fold (a backtest replays the fold
            # too); after deciding, so the archive never delays a remediation.
            try:
                self._archive.record(signals, inventory.snapshots(), now)
            except ArchiveUnavailable as exc:
                log.warning("%s", exc)
        linked = {id(s) for decision in self._opened for s in decision.signals} | self._linked
        self._opened = []
        self._linked = set()
        held = {id(s) for s in self._waiting}
        self._store([s for s in (*waited, *signals) if id(s) not in held], linked, now)
        return replace(result, dropped=screened.dropped)

    def _take_waiting(self) -> tuple[Signal, ...]:
        """The signals the last intake held back, to be decided in this one."""
        waited, self._waiting = self._waiting, ()
        return waited

    def _link_hardware(
        self, signals: Sequence[Signal], inventory: Inventory, now: datetime
    ) -> list[Signal]:
        """The machine behind each node, and each signal's GPU by UUID (see ledger/store.py):
        what `repeat: {by: gpu|machine}` counts and the GPU pages show. The ledger keeps each
        node's picture in memory and writes only when something changed."""
        assert self._ledger is not None
        machines, last = inventory.machines, self._machines_linked
        if machines is not last:  # an unchanged fleet's inventory is the same object
            for node, machine in machines.items():
                if node not in last or last[node] != machine:
                    self._ledger.observe_machine(node, machine, now)
            self._machines_linked = machines
        return self._ledger.resolve(signals)

    def _link_remediation(
        self, record: RemediationRecord, decision: Decision, policy: Policy | None
    ) -> None:
        """The remediation on its GPUs' and machine's records. A repeat counted by the
        hardware (`repeat: {by: gpu|machine}`) is the hardware failing again wherever it sits:
        its machine is quarantined in the ledger, so a pool never gets it back unnoticed."""
        assert self._ledger is not None
        self._ledger.link_signals(decision.signals)
        self._ledger.link_remediation(
            record.id, decision.node, decision.signals, record.created_at, {"policy": record.policy}
        )
        repeat = policy.match.repeat if policy is not None else None
        machine = self._ledger.machine_of(decision.node)
        if repeat is not None and repeat.by != "node" and machine is not None:
            why = f"remediation #{record.id}: {decision.reason}"
            if self._ledger.quarantine(
                machine, why, record.created_at, remediation_id=record.id, node=decision.node
            ):
                log.warning(
                    "machine %s quarantined: %s", machine, why, extra={"node": decision.node}
                )

    def _folded_text(self, signal: Signal) -> str:
        what = signal.kind.value if signal.code is None else f"{signal.kind.value} {signal.code}"
        what = what.upper() if signal.kind is SignalKind.XID else what
        where = f" on GPU {signal.gpu}" if signal.gpu is not None else ""
        taken = self._folder.last_taken(signal)
        if taken is None:
            return f"folded: a duplicate of the same {what}{where}"
        at, window = taken
        return (
            f"folded: the same {what}{where} was taken in at {at.isoformat()} "
            f"(fold window {format_duration(window)}): a source repeating a lasting fault, "
            "or the same fault again, counts once"
        )

    def _explain(
        self,
        fresh: Sequence[Signal],
        history: History,
        fencing: Sequence[RemediationRecord],
        policies: PolicySet,
        now: datetime,
        topology: Topology,
    ) -> None:
        """A disposition for each fresh signal the decisions did not account for."""
        scopes = {p.name: p.scope for p in policies.policies}
        holding = {
            **{
                node: r.id
                for r in fencing
                for node in members(r.node, scopes.get(r.policy, "node"), topology)
            },
            **self._opened_on,
        }
        for signal in fresh:
            if id(signal) in self._said:
                continue
            open_id = holding.get(signal.node)
            if open_id is not None:
                self._said[id(signal)] = ("joined", f"joined #{open_id}")
                continue
            self._said[id(signal)] = explain(
                signal, history, policies.policies, now, policies.settings
            )

    def has_queued(self) -> bool:
        queued = RemediationFilter(states=frozenset({State.QUEUED}))
        return bool(self._repo.list(queued, limit=1).rows)

    def admit_queued(
        self, inventory: Inventory, policies: PolicySet | None, now: datetime
    ) -> IntakeResult:
        """Offer the queued remediations to the budgets again (no new signal needed); close the
        ones whose node has left the cluster."""
        if policies is None:
            return IntakeResult()
        with self._lock:
            fencing: Sequence[RemediationRecord] = self._fencing()
            if not any(r.state is State.QUEUED for r in fencing):
                return IntakeResult()
            fencing, closed = self._close_cleared(fencing, (), inventory, policies)
            result = self._admit((), fencing, inventory, policies, now)
            return replace(result, closed=closed)

    def _decide(
        self,
        fresh: Sequence[Signal],
        inventory: Inventory,
        policies: PolicySet,
        now: datetime,
    ) -> IntakeResult:
        fencing: Sequence[RemediationRecord] = self._fencing()
        topology = build_topology(inventory.labels)
        fresh = without_brought_machines(fresh, fencing, inventory.pools)
        history = self._history(fencing, inventory, policies, now, topology)
        ordered = evaluate_in_order(fresh, history, policies.policies, now, policies.settings)
        evaluation, fresh, self._waiting = ordered.evaluation, ordered.decided, ordered.waiting
        self._eval_state = evaluation.state
        decisions = fold_scopes(self._not_suppressed(evaluation.decisions, now), topology)
        fencing, closed = self._close_cleared(fencing, fresh, inventory, policies)
        result = self._admit(decisions, fencing, inventory, policies, now, fresh)
        self._explain(fresh, history, fencing, policies, now, topology)
        return replace(result, closed=closed)

    def _not_suppressed(self, decisions: Sequence[Decision], now: datetime) -> list[Decision]:
        """Drop decisions a human's cancel still covers (same node, same fault, in cooldown)."""
        if not decisions:
            return []
        cancels = self._repo.list_suppressing(now)
        kept: list[Decision] = []
        for decision in decisions:
            cancel = suppressed_by(decision.node, decision.signals, cancels, now)
            if cancel is None:
                kept.append(decision)
                continue
            until = cancel.suppressed_until.isoformat() if cancel.suppressed_until else ""
            for signal in decision.signals:
                text = f"suppressed by cancel #{cancel.id} until {until}"
                self._said[id(signal)] = ("suppressed", text)
            log.info(
                "not opened: remediation %s was cancelled by a human until %s",
                cancel.id,
                cancel.suppressed_until.isoformat() if cancel.suppressed_until else "",
                extra={"node": decision.node, "policy": decision.policy},
            )
        return kept

    def _admit(
        self,
        decisions: Sequence[Decision],
        fencing: Sequence[RemediationRecord],
        inventory: Inventory,
        policies: PolicySet,
        now: datetime,
        fresh: Sequence[Signal] = (),
    ) -> IntakeResult:
        queued = [r for r in fencing if r.state is State.QUEUED]
        if not decisions and not queued:
            return IntakeResult()
        status = self._repo.controller_status()
        paused = f"automation paused by {status.paused_by}: {status.pause_reason}"
        decisions, queued, planned = self._plan(
            decisions, queued, fencing, policies, now, paused if status.paused else None, fresh
        )
        decisions, queued, machines = self._new_machines(
            decisions, queued, fencing, inventory, policies, paused if status.paused else None
        )
        candidates: list[Decision | RemediationRecord] = [*decisions, *queued]
        tripped: str | None = None
        admission: Admission[Decision | RemediationRecord]
        fleet_hold = self._fleet_breaker(decisions, queued, inventory, policies, now)
        if status.paused:
            holds = tuple(Held(c, paused, HoldCause.PAUSE) for c in candidates)
            admission = Admission((), holds, breaker_of(status))
        elif fleet_hold is not None:
            stopped = tuple(Held(c, fleet_hold, HoldCause.BREAKER) for c in candidates)
            admission = Admission((), stopped, breaker_of(status))
        else:
            admission = admit(
                candidates,
                cluster_state(inventory, fencing, {p.name: p.scope for p in policies.policies}),
                policies.settings,
                breaker_of(status),
                now,
                counted=frozenset(r.node for r in queued),
            )
            tripped = self._record_breaker(status, admission.breaker)
        created: list[RemediationRecord] = []
        for candidate in admission.admitted:
            if isinstance(candidate, RemediationRecord):
                record = self._dequeue(candidate)
            else:
                record = self._open(candidate, policies)
            if record is not None:
                created.append(record)
                self._note_urgent(record, planned.urgent.get(id(candidate)))
        newly_queued: list[RemediationRecord] = []
        for held in admission.held:
            candidate = held.decision
            if isinstance(candidate, RemediationRecord):
                self._requeue(candidate, held)
                self._note_urgent(candidate, planned.urgent.get(id(candidate)))
            elif (record := self._open(candidate, policies, held)) is not None:
                newly_queued.append(record)
                self._note_urgent(record, planned.urgent.get(id(candidate)))
        created.extend([*planned.created, *machines.created])
        newly_queued.extend([*planned.queued, *machines.queued])
        return IntakeResult(tuple(created), tuple(newly_queued), breaker_tripped=tripped)

    def _plan(
        self,
        decisions: Sequence[Decision],
        queued: Sequence[RemediationRecord],
        fencing: Sequence[RemediationRecord],
        policies: PolicySet,
        now: datetime,
        paused: str | None,
        fresh: Sequence[Signal] = (),
    ) -> tuple[list[Decision], list[RemediationRecord], PlannedResult]:
        """Planned decisions and queued plans (remediation/planned.py): those whose moment has
        come are admitted under the planned budget, the others wait for it; what is not planned
        (or urgent: its deadline passed) is handed back for the ordinary admission, and a plan
        whose events all ended is closed (a decision about one is dropped)."""
        ordinary: list[Decision] = []
        others: list[RemediationRecord] = []
        ready: list[tuple[Decision | RemediationRecord, Moment]] = []
        later: list[tuple[Decision | RemediationRecord, Moment]] = []
        result = PlannedResult()
        items: list[Decision | RemediationRecord] = [*decisions, *queued]
        for item in items:
            policy = policies.policy(item.policy)
            record = item if isinstance(item, RemediationRecord) else None
            plan = Plan(None)
            if policy is not None and (record is None or record.queue_cause == PLANNED):
                signals = item.signals if record is None else self._follow(record, fresh)
                pods = partial(self._pods, item.node)
                plan = plan_moment(
                    policy, item.pool, signals, policies, now, pods, moment_came(record, now)
                )
            moment = plan.moment
            if plan.ended:
                self._end_plan(item)
            elif moment is None or moment.urgent:
                if moment is not None:
                    result.urgent[id(item)] = moment
                if isinstance(item, RemediationRecord):
                    others.append(item)
                else:
                    ordinary.append(item)
            else:
                (ready if due(moment, now) else later).append((item, moment))
        admitted, held = admit_planned(
            [item for item, _ in ready],
            policies.settings.planned,
            planned_running(fencing, policies),
        )
        if paused is not None:
            admitted, held = [], [(item, paused) for item, _ in ready]
        moments = {id(item): moment for item, moment in (*ready, *later)}
        for item in admitted:
            if isinstance(item, RemediationRecord):
                opened = self._dequeue(item)
            else:
                opened = self._open(item, policies)
                if opened is not None:
                    self._note_plan(opened, moments[id(item)], update=False)
            if opened is not None:
                result.created.append(opened)
        waiting = [(item, why if why == paused else f"planned budget: {why}") for item, why in held]
        waiting += [(item, hold_text(moment)) for item, moment in later]
        for item, reason in waiting:
            moment = moments[id(item)]
            if isinstance(item, RemediationRecord):
                if not same_moment(item, moment) or item.hold_reason != reason:
                    self._note_plan(item, moment, reason=reason)
                continue
            opened = self._open(item, policies, Held(item, reason, HoldCause.PLANNED))
            if opened is not None:
                self._note_plan(opened, moment, reason=reason)
                result.queued.append(opened)
        return ordinary, others, result

    def _new_machines(
        self,
        decisions: Sequence[Decision],
        queued: Sequence[RemediationRecord],
        fencing: Sequence[RemediationRecord],
        inventory: Inventory,
        policies: PolicySet,
        paused: str | None,
    ) -> tuple[list[Decision], list[RemediationRecord], PlannedResult]:
        """New-machine validations (policy/new_machines.py) are admitted under their own limit,
        never through the breakers or the fault budgets; the rest is handed back."""
        ordinary = [d for d in decisions if not is_new_machine(d.signals)]
        others = [r for r in queued if not is_new_machine(r.signals)]
        items: list[Decision | RemediationRecord] = [
            *(d for d in decisions if is_new_machine(d.signals)),
            *(r for r in queued if is_new_machine(r.signals)),
        ]
        result = PlannedResult()
        if not items:
            return ordinary, others, result
        running = sum(
            1
            for r in fencing
            if r.state is not State.QUEUED and not r.dry_run and is_new_machine(r.signals)
        )
        limit = policies.settings.new_machines.max_concurrent
        admitted, held = admit_new_machines(
            items, limit, running, fleet=max(len(inventory.pools), running + len(items))
        )
        holds = [(item, f"new-machine budget: {why}") for item, why in held]
        if paused is not None:
            admitted, holds = [], [(item, paused) for item in items]
        cause = HoldCause.PAUSE if paused is not None else HoldCause.BUDGET
        for item in admitted:
            if isinstance(item, RemediationRecord):
                opened = self._dequeue(item)
            else:
                opened = self._open(item, policies)
            if opened is not None:
                result.created.append(opened)
        for item, reason in holds:
            hold: Held[Decision | RemediationRecord] = Held(item, reason, cause)
            if isinstance(item, RemediationRecord):
                self._requeue(item, hold)
            elif (record := self._open(item, policies, hold)) is not None:
                result.queued.append(record)
        return ordinary, others, result

    def _follow(self, record: RemediationRecord, fresh: Sequence[Signal]) -> list[Signal]:
        """The record's signals with any newer version of its events among `fresh` (linked to
        it, so the newest version survives a restart)."""
        linked = [
            entry.signal
            for entry in self._repo.signals_for_node(record.node, since=record.created_at)
            if entry.remediation_id == record.id
        ]
        base = [*record.signals, *linked]
        known = events_of(base)
        newer = [
            signal
            for signal in fresh
            if signal.node == record.node
            and (event := events_of([signal]).get(signal.labels.get("event_id", "")))
            and event.event_id in known
            and event != known[event.event_id]
        ]
        if newer:
            said = [f"joined #{record.id}: {s.labels.get('status', '')}" for s in newer]
            self._repo.insert_signals(newer, remediation_id=record.id, dispositions=said)
            for signal in newer:
                self._linked.add(id(signal))
                self._said[id(signal)] = ("joined", f"joined #{record.id}")
        return [*base, *newer]

    def _end_plan(self, item: Decision | RemediationRecord) -> None:
        """Every event it was about ended: a waiting plan is closed, a decision dropped."""
        reason = "the maintenance event ended (completed or cancelled): nothing to plan"
        if not isinstance(item, RemediationRecord):
            for signal in item.signals:
                self._said[id(signal)] = ("ended", reason)
            return
        self._cancel_queued(item, "maintenance_ended", reason)

    def _cancel_queued(
        self, record: RemediationRecord, action: str, reason: str
    ) -> RemediationRecord | None:
        """Close a queued remediation that has nothing left to do; None when it moved on
        meanwhile (a human, another replica)."""
        try:
            after = self._repo.transition(
                record.id,
                State.QUEUED,
                State.CANCELLED,
                action=action,
                actor=self._actor,
                detail={"reason": reason},
                expected_version=record.version,
                hold_reason=reason,
            )
        except (ConflictError, IllegalTransition):
            return None
        log_transition(
            State.QUEUED,
            after,
            action=action,
            detail={"reason": reason},
            seconds_in_state=max(0.0, (after.updated_at - record.created_at).total_seconds()),
            actor=self._actor,
        )
        return after

    def _note_plan(
        self,
        record: RemediationRecord,
        moment: Moment,
        *,
        reason: str | None = None,
        update: bool = True,
    ) -> None:
        """The plan on the timeline; on a waiting one also its moment and reason (durable)."""
        if update:
            try:
                self._repo.update_fields(
                    record.id, record.version, next_attempt_at=moment.at, hold_reason=reason
                )
            except ConflictError:
                return
        self._repo.append_event(
            record.id, action=PLANNED_ACTION, actor=self._actor, detail=planned_detail(moment)
        )

    def _note_urgent(self, record: RemediationRecord, moment: Moment | None) -> None:
        """A planned decision (or waiting plan) whose deadline passed takes the ordinary path:
        its timeline says so, once (a waiting plan leaves the planned queue with it)."""
        if moment is not None:
            self._note_plan(record, moment, update=False)

    def report_fleet_size(
        self, inventory: Inventory, policies: PolicySet | None, now: datetime
    ) -> None:
        """This cluster's node count for the fleet breaker's base, every heartbeat, so a
        cluster with no fault yet still counts in the fleet (else the first cluster to see
        faults would take its own nodes for the whole fleet)."""
        if policies is None or self._fleet is None or not policies.settings.fleet_breaker.enabled:
            return
        since = now - policies.settings.fleet_breaker.window
        self._fleet.record(self._repo.cluster, len(inventory.pools), (), since, now)

    def _fleet_breaker(
        self,
        decisions: Sequence[Decision],
        queued: Sequence[RemediationRecord],
        inventory: Inventory,
        policies: PolicySet,
        now: datetime,
    ) -> str | None:
        """The fleet breaker's hold, when this cluster takes part and it is tripped (or trips
        now). This cluster's new disruptive faults join the shared window first, counted as
        the storm breaker counts them: known nodes, not already queued."""
        config = policies.settings.fleet_breaker
        if not config.enabled or self._fleet is None:
            return None
        counted = {r.node for r in queued}
        faulted = {
            d.node
            for d in decisions
            if d.disruptive
            and d.node not in counted
            and (not inventory.pools or d.node in inventory.pools)
        }
        since = now - config.window
        self._fleet.record(self._repo.cluster, len(inventory.pools), faulted, since, now)
        status = self._fleet.status()
        if not status.tripped:
            faults, nodes = self._fleet.window(since)
            verdict = fleet_verdict(config, faults, nodes, now)
            if not verdict.trip:
                return None
            reason = verdict.reason or "fleet breaker tripped"
            if self._fleet.trip(reason=reason, by_cluster=self._repo.cluster):
                log.error("fleet breaker tripped by cluster %s: %s", self._repo.cluster, reason)
            status = self._fleet.status()
        return f"fleet breaker tripped: {status.reason or 'a storm across the fleet'}"

    def _record_breaker(self, status: ControllerStatus, breaker: BreakerState) -> str | None:
        """Persist the fault window when it changed, and the trip when it happened now."""
        if breaker.tripped and not status.breaker_tripped:
            reason = breaker.reason or "storm breaker tripped"
            self._repo.record_breaker_faults(breaker.faults)
            self._repo.trip_breaker(reason=reason)
            log.error("storm breaker tripped: %s", reason)
            return reason
        if not breaker.tripped and breaker.faults != tuple(status.breaker_faults):
            self._repo.record_breaker_faults(breaker.faults)
        return None

    def _dequeue(self, record: RemediationRecord) -> RemediationRecord | None:
        """The hold lifted: on to `detected`, with the cause it was queued for."""
        try:
            after = self._repo.transition(
                record.id,
                State.QUEUED,
                State.DETECTED,
                action="admitted",
                actor=self._actor,
                detail={"was": record.hold_reason or ""},
                expected_version=record.version,
                queue_cause=None,
                hold_reason=None,
            )
        except (ConflictError, IllegalTransition) as exc:
            log.info("queued remediation moved meanwhile: %s", exc, extra={"node": record.node})
            return None
        log_transition(
            State.QUEUED,
            after,
            action="admitted",
            detail={"was": record.hold_reason or ""},
            seconds_in_state=max(0.0, (after.updated_at - record.created_at).total_seconds()),
            actor=self._actor,
        )
        return after

    def _requeue(self, record: RemediationRecord, held: Held[Decision | RemediationRecord]) -> None:
        """Still held: keep the reason and the cause current (a budget's hold may have become
        the breaker's, which lifts the cordon)."""
        if record.queue_cause == held.cause.value and record.hold_reason == held.reason:
            return
        try:
            self._repo.update_fields(
                record.id, record.version, queue_cause=held.cause.value, hold_reason=held.reason
            )
        except ConflictError:
            return

    def _close_cleared(
        self,
        fencing: Sequence[RemediationRecord],
        fresh: Sequence[Signal],
        inventory: Inventory,
        policies: PolicySet,
    ) -> tuple[list[RemediationRecord], tuple[RemediationRecord, ...]]:
        """Close queued remediations whose cause is gone: the node left the cluster, or a fresh
        reading of its threshold policy is at or past the clear level."""
        by_name = {p.name: p for p in policies.policies}
        kept: list[RemediationRecord] = []
        closed: list[RemediationRecord] = []
        for record in fencing:
            reason = None
            if record.state is State.QUEUED:
                reason = cleared_reason(record, fresh, inventory, by_name.get(record.policy))
            if reason is None:
                kept.append(record)
                continue
            after = self._cancel_queued(record, "signals_cleared", reason)
            if after is not None:
                closed.append(after)
        return kept, tuple(closed)

    def _store(self, signals: Sequence[Signal], linked: set[int], now: datetime) -> None:
        """Keep the node pages' record without a row per reading per cycle: each (node, GPU,
        kind, code) at most once per fold window, readings included, the later ones counted
        onto that row (signals/repeats.py); the signals a new remediation carries are stored
        with it instead."""
        self._stored.expire(now)
        keep = [
            s
            for s in signals
            if id(s) not in linked and self._stored.take(s, self._said.get(id(s), ("", None)), now)
        ]
        if keep:
            said = [self._stored.text_of(s) for s in keep]
            self._repo.insert_signals(keep, dispositions=said)
            if self._ledger is not None:
                self._ledger.link_signals(keep)
        recount(self._repo.session_factory, self._repo.cluster, self._stored.changed())

    def _fencing(self) -> tuple[RemediationRecord, ...]:
        """Remediations that hold their node: the open ones and the failed ones (a failed step
        leaves the node fenced until a human retries or cancels)."""
        failed = self._all(RemediationFilter(states=frozenset({State.FAILED})))
        return (*self._repo.list_open(), *failed)

    def _history(
        self,
        fencing: Sequence[RemediationRecord],
        inventory: Inventory,
        policies: PolicySet,
        now: datetime,
        topology: Topology,
    ) -> History:
        horizon = max(
            [
                policies.settings.default_cooldown,
                *(p.cooldown for p in policies.policies if p.cooldown is not None),
                *(p.match.repeat.within for p in policies.policies if p.match.repeat),
            ]
        )
        recent = self._all(RemediationFilter(created_from=now - horizon))
        # A repeat by GPU counts a fault naming no GPU by the machine too (History.repeats_of).
        machines: dict[int, str] = {}
        behind: Mapping[str, str] = {}
        if self._ledger is not None and any(
            p.match.repeat is not None and p.match.repeat.by != "node" for p in policies.policies
        ):
            machines = self._ledger.machines_of_remediations([r.id for r in recent])
            behind = machines_behind(inventory, self._ledger.machine_of)
        return History.build(
            remediations=(
                PastRemediation(
                    r.node,
                    r.policy,
                    r.created_at,
                    r.state.value,
                    r.signal_kind,
                    gpus=frozenset(s.gpu_uuid for s in r.signals if s.gpu_uuid is not None),
                    machine=machines.get(r.id),
                )
                for r in recent
                if not never_started(r)
            ),
            open=covered(fencing, policies, topology),
            pools=inventory.pools,
            labels=inventory.labels,
            state=self._eval_state,
            machines=behind,
        )

    def _all(self, filters: RemediationFilter) -> list[RemediationRecord]:
        rows: list[RemediationRecord] = []
        cursor: str | None = None
        while True:
            page = self._repo.list(filters, cursor=cursor, limit=PAGE)
            rows.extend(page.rows)
            if page.next_cursor is None:
                return rows
            cursor = page.next_cursor

    def _open(
        self,
        decision: Decision,
        policies: PolicySet,
        held: Held[Decision | RemediationRecord] | None = None,
    ) -> RemediationRecord | None:
        detail: dict[str, object] = {"reason": decision.reason, "signals": len(decision.signals)}
        if decision.scope != "node":
            detail.update(scope=decision.scope, domain=decision.domain, trays=len(decision.members))
        if held is not None:
            detail["held"] = held.reason
        try:
            record = self._repo.create(
                new_remediation(decision, policies),
                actor=self._actor,
                action="queued" if held is not None else "detected",
                detail=detail,
                queued=held.cause.value if held is not None else None,
                hold_reason=held.reason if held is not None else None,
            )
        except OpenRemediationExists as exc:
            log.info("not opened: %s", exc, extra={"node": decision.node})
            return None
        said = (
            ("queued", f"queued #{record.id}: {held.reason}")
            if held is not None
            else ("opened", f"opened #{record.id}")
        )
        for signal in decision.signals:
            self._said[id(signal)] = said
        for node in decision.members or (decision.node,):
            self._opened_on[node] = record.id
        self._repo.insert_signals(
            list(decision.signals),
            remediation_id=record.id,
            dispositions=[said[1]] * len(decision.signals),
        )
        if self._ledger is not None:
            self._link_remediation(record, decision, policies.policy(decision.policy))
        self._opened.append(decision)
        log.info(
            "remediation queued: %s (%s)" if held else "remediation opened: %s%s",
            decision.reason,
            held.reason if held else "",
            extra={
                "remediation_id": record.id,
                "node": record.node,
                "state": record.state.value,
                "policy": record.policy,
            },
        )
        return record


def cleared_reason(
    record: RemediationRecord,
    fresh: Sequence[Signal],
    inventory: Inventory,
    policy: Policy | None,
) -> str | None:
    if inventory.pools and record.node not in inventory.pools:
        return f"node {record.node} has left the cluster"
    reported = inventory.conditions.get(record.node)
    types = {s.labels.get("type") for s in record.signals if s.kind is SignalKind.NODE_CONDITION}
    if reported is not None and types and None not in types:
        gone = [t for t in sorted(t for t in types if t) if not is_abnormal(t, reported.get(t, ""))]
        if len(gone) == len(types):
            return f"node condition {', '.join(gone)} cleared"
    threshold = policy.match.threshold if policy is not None else None
    if threshold is None or policy is None:
        return None
    gpus = {s.gpu for s in record.signals}
    for signal in fresh:
        if signal.node != record.node or signal.kind is not policy.match.kind:
            continue
        if gpus and signal.gpu not in gpus:
            continue
        if threshold.cleared(signal.value) and not threshold.breached(signal.value):
            shown = "no value" if signal.value is None else f"{signal.value:g}"
            return f"{signal.kind.value} reading cleared ({shown})"
    return None
