"""Signals in, remediations out: fold duplicates, store what was seen, evaluate the policies
against the durable history, pass the decisions through the budgets and the storm breaker, and
open a remediation (state `detected`) for each one admitted.

The evaluation's streak and burst state and the breaker's fault window live here, on the leader,
between cycles; the breaker's trip itself is written to the store, so it survives restarts and
only a human resets it (from the console). A decision the budget holds opens nothing: the signal
that caused it is re-announced after the fold window and decided afresh then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from remediator.kube.objects import Node
from remediator.policy.budget import Admission, BreakerState, ClusterState, admit
from remediator.policy.evaluate import (
    Decision,
    EvalState,
    History,
    PastRemediation,
    evaluate,
)
from remediator.policy.loader import PolicySet
from remediator.remediation.planner import ladder_from_policy
from remediator.remediation.states import State
from remediator.signals.dedup import SignalFolder
from remediator.signals.model import Signal, SignalKind
from remediator.signals.screen import Dropped, screen
from remediator.store.records import (
    ControllerStatus,
    NewRemediation,
    RemediationFilter,
    RemediationRecord,
)
from remediator.store.repository import OpenRemediationExists, Repository

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

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node], pool_label: str) -> Inventory:
        nodes = list(nodes)
        return cls(
            pools={n.name: n.labels.get(pool_label, "") for n in nodes},
            labels={n.name: dict(n.labels) for n in nodes},
            not_ready=frozenset(n.name for n in nodes if not n.ready),
            cordoned=frozenset(n.name for n in nodes if n.unschedulable),
            gpus={n.name: n.gpus for n in nodes},
        )

    def gpu_counts(self) -> dict[str, int | None]:
        """Every node the cluster has → its GPU count (None when unknown)."""
        return {node: self.gpus.get(node) for node in self.pools}

    def nodes_per_pool(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for pool in self.pools.values():
            counts[pool] = counts.get(pool, 0) + 1
        return counts


@dataclass(frozen=True)
class IntakeResult:
    created: tuple[RemediationRecord, ...] = ()
    held: tuple[tuple[Decision, str], ...] = ()
    breaker_tripped: str | None = None  # the reason, when it tripped in this cycle
    dropped: tuple[Dropped, ...] = ()  # signals the cluster cannot have (signals.screen)


def cluster_state(inventory: Inventory, fencing: Sequence[RemediationRecord]) -> ClusterState:
    """Unhealthy = not Ready, cordoned, or fenced by a remediation that touches the cluster."""
    unhealthy: dict[str, set[str]] = {}
    for node in inventory.not_ready | inventory.cordoned:
        unhealthy.setdefault(inventory.pools.get(node, ""), set()).add(node)
    acting = [r for r in fencing if not r.dry_run]
    for record in acting:
        pool = record.pool or inventory.pools.get(record.node, "")
        unhealthy.setdefault(pool, set()).add(record.node)
    return ClusterState(
        nodes_per_pool=inventory.nodes_per_pool(),
        unhealthy={pool: frozenset(nodes) for pool, nodes in unhealthy.items()},
        open_remediations=len(acting),
    )


def breaker_from(status: ControllerStatus, memory: BreakerState) -> BreakerState:
    """The stored trip wins; a human's reset (stored) clears the remembered window too."""
    if status.breaker_tripped:
        if memory.tripped:
            return memory
        return BreakerState(True, status.breaker_tripped_at, status.breaker_reason, memory.faults)
    return BreakerState() if memory.tripped else memory


def new_remediation(decision: Decision, policies: PolicySet) -> NewRemediation:
    return NewRemediation(
        node=decision.node,
        policy=decision.policy,
        reason=decision.reason,
        signals=decision.signals,
        ladder=[step.to_json() for step in ladder_from_policy(decision.actions)],
        pool=decision.pool or None,
        policy_priority=decision.priority,
        policy_commit=policies.commit,
        policy_hash=policies.content_hash,
        dry_run=decision.dry_run,
        approval_required=decision.approval == "required",
    )


class Intake:
    def __init__(
        self,
        repository: Repository,
        *,
        actor: str,
        fold_window: timedelta = DEFAULT_FOLD_WINDOW,
    ) -> None:
        self._repo = repository
        self._actor = actor
        self._folder = SignalFolder(fold_window)
        self._fold_window = fold_window
        self._last_stored: dict[tuple[str, int | None, SignalKind, int | None], datetime] = {}
        self._opened: list[Decision] = []
        self._eval_state = EvalState()
        self._breaker = BreakerState()
        self._lock = threading.Lock()

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
        fresh = self._folder.fold(signals, now)
        result = IntakeResult()
        if policies is not None and fresh:
            result = self._decide(fresh, inventory, policies, now)
        linked = {id(s) for decision in self._opened for s in decision.signals}
        self._opened = []
        self._store(signals, linked, now)
        return replace(result, dropped=screened.dropped)

    def _decide(
        self,
        fresh: Sequence[Signal],
        inventory: Inventory,
        policies: PolicySet,
        now: datetime,
    ) -> IntakeResult:
        fencing = self._fencing()
        history = self._history(fencing, inventory, policies, now)
        evaluation = evaluate(fresh, history, policies.policies, now, policies.settings)
        self._eval_state = evaluation.state
        if not evaluation.decisions:
            return IntakeResult()
        status = self._repo.controller_status()
        if status.paused:
            reason = f"automation paused by {status.paused_by}: {status.pause_reason}"
            return IntakeResult(held=tuple((d, reason) for d in evaluation.decisions))
        breaker = breaker_from(status, self._breaker)
        admission = admit(
            evaluation.decisions,
            cluster_state(inventory, fencing),
            policies.settings,
            breaker,
            now,
        )
        self._breaker = admission.breaker
        tripped = self._record_trip(status, admission)
        created = tuple(
            record
            for decision in admission.admitted
            if (record := self._open(decision, policies)) is not None
        )
        for held in admission.held:
            log.warning(
                "decision held: %s",
                held.reason,
                extra={"node": held.decision.node, "policy": held.decision.policy},
            )
        return IntakeResult(created, tuple((h.decision, h.reason) for h in admission.held), tripped)

    def _store(self, signals: Sequence[Signal], linked: set[int], now: datetime) -> None:
        """Keep the node pages' record without a row per reading per cycle: each (node, GPU,
        kind, code) at most once per fold window, readings included; the signals a new
        remediation carries are stored with it instead."""
        horizon = now - self._fold_window
        self._last_stored = {k: at for k, at in self._last_stored.items() if at > horizon}
        keep: list[Signal] = []
        for signal in signals:
            key = signal.dedup_key
            if id(signal) in linked or key in self._last_stored:
                continue
            self._last_stored[key] = now
            keep.append(signal)
        if keep:
            self._repo.insert_signals(keep)

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
    ) -> History:
        horizon = max(
            [
                policies.settings.default_cooldown,
                *(p.cooldown for p in policies.policies if p.cooldown is not None),
                *(p.match.repeat.within for p in policies.policies if p.match.repeat),
            ]
        )
        recent = self._all(RemediationFilter(created_from=now - horizon))
        return History.build(
            remediations=(
                PastRemediation(r.node, r.policy, r.created_at, r.state.value) for r in recent
            ),
            open={r.node: r.policy for r in fencing},
            pools=inventory.pools,
            labels=inventory.labels,
            state=self._eval_state,
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

    def _record_trip(self, status: ControllerStatus, admission: Admission) -> str | None:
        breaker = admission.breaker
        if not breaker.tripped or status.breaker_tripped:
            return None
        reason = breaker.reason or "storm breaker tripped"
        self._repo.trip_breaker(reason=reason)
        log.error("storm breaker tripped: %s", reason)
        return reason

    def _open(self, decision: Decision, policies: PolicySet) -> RemediationRecord | None:
        try:
            record = self._repo.create(
                new_remediation(decision, policies),
                actor=self._actor,
                detail={"reason": decision.reason, "signals": len(decision.signals)},
            )
        except OpenRemediationExists as exc:
            log.info("not opened: %s", exc, extra={"node": decision.node})
            return None
        self._repo.insert_signals(list(decision.signals), remediation_id=record.id)
        self._opened.append(decision)
        log.info(
            "remediation opened: %s",
            decision.reason,
            extra={
                "remediation_id": record.id,
                "node": record.node,
                "state": record.state.value,
                "policy": record.policy,
            },
        )
        return record
