"""The fence owner's executor: every poll it drives Kubernetes (cordon, our taint, our marks) and
Slurm (the drain with our reason) toward what the store requires (derive.py), both ways:

* a fence due and missing (a human's `kubectl uncordon`, a Node recreated, slurmctld restarted
  with `-c`) is drift: re-asserted (or, with `on_drift: report`, only reported), written on the
  remediation's timeline and counted in `remediator_fence_drift_total{kind}`;
* a fence of ours no longer due is lifted only on a decision this store recorded: a remediation
  of ours that finished or was cancelled, a machine hold lifted, an operator's release;
* a foreign fence (marks.py) is never lifted by itself: it is listed for an operator, who may
  adopt or release it, with a reason, audited (store/fences.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge

from remediator.actions.outcome import Done, Held, Outcome
from remediator.actions.quarantine import (
    ANN_MACHINE_HOLD,
    ANN_POLICY,
    ANN_PRIOR_CORDON,
    ANN_REMEDIATION_ID,
    ANN_SIGNAL,
    QUARANTINE_ANNOTATIONS,
    Why,
    quarantine,
)
from remediator.actions.release import release
from remediator.errors import NotFoundError, RemediatorError, TransientError
from remediator.fences.derive import FENCING_STATES, Kind, Required, remediation_nodes, required
from remediator.fences.marks import (
    ANN_OPERATOR_FENCE,
    QUARANTINE_TAINT,
    FenceIdentity,
    Known,
    Owner,
    owner_of,
    read_mark,
)
from remediator.fences.plan import (
    SLURM_RESUMED,
    UNCORDONED,
    UNMARKED,
    UNTAINTED,
    NodePlan,
    plan_all,
)
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node, ObjectRef
from remediator.model.states import TERMINAL, State
from remediator.slurm import steps as slurm_steps
from remediator.slurm.client import SlurmClient
from remediator.slurm.engine import SlurmSteps
from remediator.slurm.settings import SlurmSettings
from remediator.store.fences import Decision, FenceAction, FenceBook
from remediator.store.optouts import Asker
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import Repository

log = logging.getLogger(__name__)

DriftMode = Literal["reassert", "report"]
# The timeline's lines.
DRIFT_EVENT = "fence_drift"
KEPT_FENCED = "node_kept_fenced"
RELEASED_EVENT = "node_released"
# A look older than this is taken anew when the console asks (a pass is every 10 s).
VIEW_MAX_AGE_SECONDS = 15.0
# Failed remediations looked at each pass (open ones are all read).
FAILED_LISTED = 500
# The names a foreign history gave its fence, dropped when an operator adopts it.
FOREIGN_NAMES = (ANN_REMEDIATION_ID, ANN_POLICY, ANN_SIGNAL, ANN_MACHINE_HOLD)


class FenceRefused(RemediatorError):
    """An operator's fence command that cannot be done as asked (the API's 4xx)."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ForeignFence:
    node: str
    why: str
    mark: Mapping[str, str]
    cordoned: bool


@dataclass(frozen=True)
class FenceView:
    """A node's fence as the last pass saw it: the console's and the API's answer."""

    node: str
    owner: Owner
    needs: tuple[Required, ...]
    drift: tuple[str, ...]
    mark: Mapping[str, str]
    why: str = ""


@dataclass(frozen=True)
class Look:
    me: FenceIdentity
    decisions: Sequence[Decision]
    due: Mapping[str, list[Required]]
    plans: Sequence[NodePlan]


@dataclass
class PassResult:
    released: list[str] = field(default_factory=list)
    reasserted: list[str] = field(default_factory=list)
    drifted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    foreign: list[ForeignFence] = field(default_factory=list)


class FenceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.drift = Counter(
            "remediator_fence_drift",
            "Fences found missing where the store requires one (a human uncordon, a wiped "
            "Slurm drain, a recreated Node), by what was missing",
            ["kind"],
            registry=registry,
        )
        self.foreign = Gauge(
            "remediator_foreign_fences",
            "Nodes fenced by marks this store did not write (another database's history)",
            registry=registry,
        )
        self.released = Counter(
            "remediator_fences_released",
            "Fences lifted on a decision this store recorded",
            registry=registry,
        )
        for kind in (UNCORDONED, UNTAINTED, UNMARKED, SLURM_RESUMED):
            self.drift.labels(kind)


def _always() -> bool:
    return True


def _reassert() -> DriftMode:
    return "reassert"


def _nothing_held(_node: str) -> str | None:
    return None


def _no_machine(_machine: str) -> bool:
    return False


class FenceOwner:
    def __init__(
        self,
        repository: Repository,
        kube: KubeClient,
        book: FenceBook,
        *,
        actor: str,
        identity: Callable[[], FenceIdentity | None],
        registry: CollectorRegistry | None = None,
        may_act: Callable[[], bool] = _always,
        on_drift: Callable[[], DriftMode] = _reassert,
        machine_hold: Callable[[str], str | None] = _nothing_held,
        machine_known: Callable[[str], bool] = _no_machine,
        slurm: SlurmSteps | None = None,
        slurm_client: SlurmClient | None = None,
        slurm_settings: SlurmSettings | None = None,
        list_nodes: Callable[[], Sequence[Node]] | None = None,
    ) -> None:
        self._repo = repository
        self._kube = kube
        self._book = book
        self._actor = actor
        self._identity = identity
        self._may_act = may_act
        self._on_drift = on_drift
        self._machine_hold = machine_hold
        self._machine_known = machine_known
        self._slurm = slurm
        self._slurm_client = slurm_client
        self._slurm_settings = slurm_settings
        self.metrics = FenceMetrics(registry or CollectorRegistry())
        self._lock = threading.Lock()
        self._views: dict[str, FenceView] = {}
        self._looked_at = float("-inf")
        self._list_nodes = list_nodes
        # (node, drift kind) reported and not yet gone: said once on the timeline, not per pass.
        self._reported: set[tuple[str, str]] = set()
        # Operators' releases of foreign fences already carried out (each lifts one fence).
        self._carried: set[int] = set()
        # Terminal remediations' nodes, by id: a finished row's nodes never change.
        self._finished_nodes: dict[int, frozenset[str]] = {}

    # -- what the console reads ----------------------------------------------------------------

    def views(self) -> list[FenceView]:
        """The last look's fences; looked at anew when older than a pass (a follower replica
        looks for its console: only the leader's passes act)."""
        with self._lock:
            fresh = time.monotonic() - self._looked_at < VIEW_MAX_AGE_SECONDS
        if not fresh and self._list_nodes is not None:
            self.look(self._list_nodes())
        with self._lock:
            return sorted(self._views.values(), key=lambda v: v.node)

    def watches(self, node: str) -> bool:
        """Whether the last look found a fence due on `node` (its changes are looked at now)."""
        with self._lock:
            view = self._views.get(node)
        return view is not None and bool(view.needs)

    def foreign(self) -> list[FenceView]:
        return [v for v in self.views() if v.owner is Owner.FOREIGN and not v.needs]

    # -- the pass ------------------------------------------------------------------------------

    def fencing(self) -> tuple[RemediationRecord, ...]:
        """Open and failed remediations in a fencing state, and queued ones (the queue's
        cordon), with their timelines."""
        failed = self._repo.list(
            RemediationFilter(states=frozenset({State.FAILED})), limit=FAILED_LISTED
        ).rows
        found = [
            r
            for r in (*self._repo.list_open(), *failed)
            if r.state in FENCING_STATES or r.state is State.QUEUED
        ]
        return self._repo.with_events(found)

    def look(self, nodes: Sequence[Node]) -> Look | None:
        """Compare the store's fences with the nodes (no write); None when nothing can be told:
        no identity yet (no mark can be told ours), or an empty list (it says nothing)."""
        me = self._identity()
        if me is None or not nodes:
            return None
        decisions = self._book.decisions()
        records = self.fencing()
        due = required(records, decisions)
        plans = plan_all(nodes, due, me, self._known(decisions, records))
        views = {
            p.node: FenceView(p.node, p.owner, p.needs, p.drift, p.mark.as_text(), p.foreign_why)
            for p in plans
        }
        with self._lock:
            self._views = views
            self._looked_at = time.monotonic()
        self.metrics.foreign.set(
            sum(1 for v in views.values() if v.owner is Owner.FOREIGN and not v.needs)
        )
        return Look(me, decisions, due, plans)

    def reconcile(self, nodes: Sequence[Node]) -> PassResult:
        result = PassResult()
        looked = self.look(nodes)
        if looked is None:
            return result
        me, decisions, due, plans = looked.me, looked.decisions, looked.due, looked.plans
        newest = {d.node: d for d in decisions}
        by_name = {n.name: n for n in nodes}
        result.foreign = [
            ForeignFence(p.node, p.foreign_why, p.mark.as_text(), by_name[p.node].unschedulable)
            for p in plans
            if p.owner is Owner.FOREIGN and not p.needs
        ]
        if not self._may_act():
            return result
        for plan in plans:
            try:
                self._carry_out(plan, me, newest.get(plan.node), result)
            except RemediatorError as exc:
                log.warning("fence of %s: %s", plan.node, exc, extra={"node": plan.node})
        self._slurm_pass(due, by_name, result)
        self._forget_fixed(plans, result)
        return result

    def _known(
        self, decisions: Sequence[Decision], records: Sequence[RemediationRecord] = ()
    ) -> Known:
        by_id = {str(d.id): d for d in decisions}
        read = {r.id: remediation_nodes(r) for r in records}

        def remediation(remediation_id: int) -> frozenset[str] | None:
            cached = read.get(remediation_id) or self._finished_nodes.get(remediation_id)
            if cached is not None:
                return cached
            record = self._repo.get(remediation_id)
            if record is None:
                return None
            nodes = remediation_nodes(record)
            if record.state in TERMINAL:
                self._finished_nodes[remediation_id] = nodes
            return nodes

        def operator(decision_id: str, node: str) -> bool:
            found = by_id.get(decision_id)
            return found is not None and found.node == node

        return Known(remediation, operator, self._machine_known)

    def _carry_out(
        self, plan: NodePlan, me: FenceIdentity, newest: Decision | None, result: PassResult
    ) -> None:
        if plan.stamp and plan.owner is Owner.OURS and plan.mark.present:
            # A mark of ours written before marks named their store: it does now.
            self._kube.set_node_annotations(plan.node, dict(plan.stamp))
        if plan.needs:
            self._keep(plan, me, result)
            return
        if plan.release_candidate:
            self._maybe_release(plan, newest, result)
            return
        if (
            plan.owner is Owner.FOREIGN
            and newest is not None
            and newest.action is FenceAction.RELEASE
            and newest.mark == plan.mark.as_text()
            and newest.id not in self._carried
        ):
            # Once: the same marks written again later are a new fence, not the one released.
            self._carried.add(newest.id)
            # An operator released this very foreign fence (the marks it saw): lifted now.
            outcome = self._lift(plan.node, "")
            result.released.append(plan.node)
            self.metrics.released.inc()
            log.info("released foreign fence: %s", outcome, extra={"node": plan.node})

    # -- due: keep, re-assert ------------------------------------------------------------------

    def _keep(self, plan: NodePlan, me: FenceIdentity, result: PassResult) -> None:
        need = _primary(plan.needs)
        if need.decision_id is not None and plan.mark.operator != str(need.decision_id):
            # An operator's decision not yet applied here (a fence, an adoption, a failed
            # validation whose remediation ended): applying it is no drift.
            self._apply_operator(plan.node, need, me)
            return
        named = plan.mark.remediation_id
        wanting = {str(n.remediation_id) for n in plan.needs if n.remediation_id is not None}
        if plan.owner is Owner.OURS and need.remediation_id and named and named not in wanting:
            # The mark names a remediation of ours that no longer fences the node (finished,
            # not yet released) while another needs it: the mark is handed over, or the
            # quarantine of the one that needs it would hold on the stale owner for ever.
            self._kube.set_node_annotations(
                plan.node,
                {ANN_REMEDIATION_ID: str(need.remediation_id), ANN_POLICY: need.policy},
            )
        if plan.drift:
            result.drifted[plan.node] = plan.drift
            self._drifted(plan, need, me, result)

    def _drifted(
        self, plan: NodePlan, need: Required, me: FenceIdentity, result: PassResult
    ) -> None:
        new = [k for k in plan.drift if (plan.node, k) not in self._reported]
        reassert = self._on_drift() == "reassert"
        for kind in new:
            self.metrics.drift.labels(kind).inc()
        if reassert:
            if plan.owner is Owner.FOREIGN:
                self._cordon_and_taint(plan.node)
            elif need.remediation_id is not None:
                why = Why(str(need.remediation_id), need.policy, need.reason, me.annotations())
                if not isinstance(quarantine(self._kube, plan.node, why), Done):
                    # Marked by another remediation of ours that is still open: the fence
                    # matters more than whose name it carries.
                    self._cordon_and_taint(plan.node)
            else:
                self._apply_operator(plan.node, need, me)
            result.reasserted.append(plan.node)
        else:
            self._reported.update((plan.node, k) for k in plan.drift)
        if new or reassert:
            self._note_drift(plan.node, plan.drift, need, reassert)

    def _note_drift(
        self, node: str, kinds: Sequence[str], need: Required, reasserted: bool
    ) -> None:
        what = ", ".join(kinds)
        verb = "re-asserted" if reasserted else "reported (fences.on_drift: report)"
        log.warning(
            "fence drift on %s (%s): %s; %s",
            node,
            what,
            need.reason,
            verb,
            extra={"node": node, "remediation_id": need.remediation_id},
        )
        if need.remediation_id is not None:
            self._repo.append_event(
                need.remediation_id,
                action=DRIFT_EVENT,
                actor=self._actor,
                detail={
                    "node": node,
                    "drift": list(kinds),
                    "reasserted": reasserted,
                    "reason": f"the fence on {node} was found {what}; {verb}",
                },
            )

    def _cordon_and_taint(self, node: str) -> None:
        current = self._kube.get_node(node)
        if not current.unschedulable:
            self._kube.cordon(node)
        if not current.has_taint(QUARANTINE_TAINT):
            self._kube.add_taint(node, QUARANTINE_TAINT)

    def _apply_operator(self, node: str, need: Required, me: FenceIdentity) -> None:
        """Mark the node with the operator's decision (and this store); cordon and taint. An
        adopted node loses the foreign history's names: the fence is this store's now."""
        current = self._kube.get_node(node)
        mark = read_mark(current)
        owner, _ = owner_of(mark, node, me, self._known(self._book.decisions()))
        marks: dict[str, str | None] = {ANN_OPERATOR_FENCE: str(need.decision_id)}
        marks.update(me.annotations())
        if owner is Owner.FOREIGN:
            marks.update(dict.fromkeys(FOREIGN_NAMES))
        elif current.unschedulable and mark.remediation_id is None and not mark.operator:
            # A cordon already there is a human's: the release leaves it.
            marks[ANN_PRIOR_CORDON] = "true"
        self._kube.annotate_and_cordon(node, marks)
        if not current.has_taint(QUARANTINE_TAINT):
            self._kube.add_taint(node, QUARANTINE_TAINT)
        self._kube.create_event(
            ObjectRef.of_node(current),
            "RemediatorFence",
            f"Fenced by decision {need.decision_id}: {need.reason}",
            "Warning",
        )

    # -- not due: release on a recorded decision -----------------------------------------------

    def _maybe_release(self, plan: NodePlan, newest: Decision | None, result: PassResult) -> None:
        record = (
            self._repo.get(int(plan.mark.remediation_id))
            if plan.mark.remediation_id and plan.mark.remediation_id.isdigit()
            else None
        )
        if record is not None and record.state not in TERMINAL:
            return  # its own step fences or lifts it (queued, quarantined, returning)
        released = newest is not None and newest.action is FenceAction.RELEASE
        if plan.mark.operator is not None and not released:
            return
        held = self._machine_hold(plan.node)
        if held is not None:
            # The ledger says the hardware is quarantined: the end of a remediation does not
            # return it; the lift does (docs/ledger.md).
            if record is not None and not _noted(record, KEPT_FENCED, plan.node):
                self._repo.append_event(
                    record.id,
                    action=KEPT_FENCED,
                    actor=self._actor,
                    detail={"node": plan.node, "reason": held},
                )
            return
        outcome = self._lift(plan.node, str(record.id) if record else "")
        if released and newest is not None:
            self._carried.add(newest.id)
        result.released.append(plan.node)
        self.metrics.released.inc()
        log.info("released %s: %s", plan.node, outcome, extra={"node": plan.node})
        if record is not None:
            self._repo.append_event(
                record.id,
                action=RELEASED_EVENT,
                actor=self._actor,
                detail={"result": outcome, "node": plan.node},
            )
            if self._slurm is not None and not record.dry_run:
                try:
                    self._slurm.release(record)
                except RemediatorError as exc:
                    log.warning("Slurm release of %s failed: %s", record.node, exc)

    def _lift(self, node: str, remediation_id: str) -> str:
        """Uncordon (unless a human's cordon was there first), untaint, drop our marks."""
        current = self._kube.get_node(node)
        mark = read_mark(current)
        if mark.operator is None and mark.remediation_id is not None and remediation_id:
            outcome = release(self._kube, node, remediation_id)
            return outcome.detail if isinstance(outcome, Done) else outcome.reason
        done = []
        if current.unschedulable and current.annotations.get(ANN_PRIOR_CORDON) != "true":
            self._kube.uncordon(node)
            done.append("uncordon")
        if current.has_taint(QUARANTINE_TAINT):
            self._kube.remove_taint(node, QUARANTINE_TAINT.key, QUARANTINE_TAINT.effect)
            done.append(f"remove taint {QUARANTINE_TAINT.key}")
        drop = [
            k for k in (*QUARANTINE_ANNOTATIONS, ANN_OPERATOR_FENCE) if k in current.annotations
        ]
        if drop:
            self._kube.set_node_annotations(node, dict.fromkeys(drop))
            done.append("remove " + ", ".join(drop))
        self._kube.create_event(
            ObjectRef.of_node(current), "RemediatorRelease", f"Fence lifted: {', '.join(done)}"
        )
        return f"released {node}: {', '.join(done) or 'nothing left'}"

    # -- Slurm -----------------------------------------------------------------------------------

    def _slurm_pass(
        self, due: Mapping[str, list[Required]], nodes: Mapping[str, Node], result: PassResult
    ) -> None:
        """A due fence's Slurm node must not take jobs: drained (or down) with a reason."""
        client, settings = self._slurm_client, self._slurm_settings
        if client is None or settings is None or not due:
            return
        try:
            known = {n.name: n for n in client.nodes()}
        except TransientError as exc:
            log.warning("Slurm fences not checked: %s", exc)
            return
        me = self._identity()
        for name, all_needs in due.items():
            node = nodes.get(name)
            needs = [n for n in all_needs if n.slurm]
            if node is None or not needs:
                continue
            slurm_name = slurm_node_of(node, settings)
            found = known.get(slurm_name)
            if found is None or found.fenced:
                self._reported.discard((name, SLURM_RESUMED))
                continue
            need = _primary(needs)
            kinds = (SLURM_RESUMED,)
            result.drifted[name] = (*result.drifted.get(name, ()), SLURM_RESUMED)
            reassert = self._on_drift() == "reassert"
            first = (name, SLURM_RESUMED) not in self._reported
            if first:
                self.metrics.drift.labels(SLURM_RESUMED).inc()
            if reassert and me is not None:
                journal = slurm_steps.Journal()
                owner = str(need.remediation_id) if need.remediation_id else "fence"
                try:
                    slurm_steps.drain(client, slurm_name, owner, need.policy or "fence", journal)
                except RemediatorError as exc:
                    log.warning("Slurm drain of %s failed: %s", slurm_name, exc)
                    continue
                if name not in result.reasserted:
                    result.reasserted.append(name)
            else:
                self._reported.add((name, SLURM_RESUMED))
            if first or reassert:
                self._note_drift(name, kinds, need, reassert)

    def _forget_fixed(self, plans: Sequence[NodePlan], result: PassResult) -> None:
        """A reported drift that is gone (fixed by hand, or re-asserted) may be said again."""
        drifting = {(n, k) for n, kinds in result.drifted.items() for k in kinds}
        planned = {p.node for p in plans}
        self._reported = {(n, k) for n, k in self._reported if (n, k) in drifting and n in planned}

    # -- what the steps ask (fencer.py) ----------------------------------------------------------

    def fence(self, node: str, why: Why, *, dry_run: bool = False) -> Outcome:
        """A step's fence, with this store's identity on its marks."""
        me = self._identity()
        marked = replace(why, marks=me.annotations()) if me is not None else why
        return quarantine(self._kube, node, marked, dry_run=dry_run)

    def unfence(self, node: str, remediation_id: str) -> Outcome:
        """A step's release (a repaired node back, a new machine in service): refused while
        anything else the store records still requires the node fenced (an operator's fence, a
        failed validation, another remediation of ours)."""
        decisions = self._book.decisions()
        try:
            current = self._kube.get_node(node)
        except NotFoundError:
            return Done(f"node {node} is gone; nothing to release", {"node": node})
        others = [
            n
            for n in required(self.fencing(), decisions).get(node, ())
            if str(n.remediation_id) != remediation_id and n.applies_to(current)
        ]
        if others:
            return Held(
                f"{node} stays fenced: {others[0].reason}",
                {"node": node, "fenced_by": others[0].kind.value},
            )
        return release(self._kube, node, remediation_id)

    # -- an operator's commands ----------------------------------------------------------------

    def command(
        self,
        node: str,
        action: FenceAction,
        *,
        reason: str,
        asker: Asker,
        node_known: Callable[[str], bool | None],
    ) -> Decision:
        """Record an operator's decision (applied by the next pass): fence a node, release a
        fence, adopt a foreign one. Refused (nothing written) for an unknown node, without a
        reason, or when the node's state does not fit the command."""
        if not reason.strip():
            raise FenceRefused(f"a fence {action.value} needs a reason", 422)
        if node_known(node) is False:
            raise FenceRefused(f"node {node} is not in this cluster", 404)
        view = next((v for v in self.views() if v.node == node), None)
        if action is FenceAction.ADOPT:
            if view is None or view.owner is not Owner.FOREIGN:
                raise FenceRefused(f"node {node} carries no foreign fence to adopt")
            return self._book.record(node, action, reason=reason, asker=asker, mark=view.mark)
        if action is FenceAction.RELEASE:
            holding = [n for n in (view.needs if view else ()) if n.kind is not Kind.OPERATOR]
            holding = [n for n in holding if n.kind is not Kind.FAILED_VALIDATION]
            if holding:
                raise FenceRefused(
                    f"node {node} is fenced by {holding[0].reason}: cancel or finish that "
                    "remediation first"
                )
            if view is None:
                raise FenceRefused(f"node {node} carries no fence of remediator's to release")
            return self._book.record(node, action, reason=reason, asker=asker, mark=view.mark)
        return self._book.record(node, action, reason=reason, asker=asker)


def _primary(needs: Iterable[Required]) -> Required:
    """The need whose remediation hears of drift: a remediation's before an operator's."""
    ordered = sorted(needs, key=lambda n: (n.remediation_id is None, n.remediation_id or 0))
    return ordered[0]


def _noted(record: RemediationRecord, action: str, node: str) -> bool:
    return any(e.action == action and e.detail.get("node") == node for e in record.events)


def slurm_node_of(node: Node, settings: SlurmSettings) -> str:
    """The Slurm node of a Kubernetes node: its label when set, else the name template."""
    if settings.node_label and (value := node.labels.get(settings.node_label)):
        return value
    return settings.node_template.format(name=node.name)
