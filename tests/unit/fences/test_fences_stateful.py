"""The fence owner under Hypothesis: thousands of sequences of remediations moving through the
state table (their replacements taking nodes away), humans uncordoning, another history's marks
and operators' decisions, with the real FenceOwner and node_gone's rule over an in-memory cluster
and store. After every reconcile pass the invariants of docs/safety.md hold:

I1: every node the store requires fenced (held, failed, a failed validation, …) is cordoned and
    tainted; I2: a fence is lifted only on a recorded decision of this store (a finished
    remediation of ours, an operator's release), never a foreign one by itself;
    and node_gone never ends a remediation its own replacement took the node from."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from remediator.fences.derive import required
from remediator.fences.marks import (
    ANN_REMEDIATION_ID,
    ANN_STORE,
    QUARANTINE_TAINT,
    FenceIdentity,
    Owner,
)
from remediator.fences.owner import FenceOwner
from remediator.kube.objects import Node, Taint
from remediator.model.states import TERMINAL, TRANSITIONS, State, check_transition
from remediator.remediation.node_gone import gone_ones
from remediator.store.fences import Decision, FenceAction
from remediator.store.optouts import Asker
from remediator.store.records import EventRecord, Page, RemediationRecord
from tests.unit.web.builders import record as build

ME = FenceIdentity("store-me", "uid-1")
OTHER = FenceIdentity("store-other", "uid-1")
T0 = datetime(2026, 12, 7, tzinfo=UTC)
NODES = [f"n{i}" for i in range(6)]


class Kube:
    """The Kubernetes calls the owner and the steps make, over a dict of Nodes."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {
            n: Node(n, uid=n, resource_version="1", created_at=T0) for n in NODES
        }

    def _put(self, name: str, **changes: Any) -> Node:
        node = dataclasses.replace(self.nodes[name], **changes)
        self.nodes[name] = node
        return node

    def get_node(self, name: str) -> Node:
        return self.nodes[name]

    def cordon(self, name: str) -> Node:
        return self._put(name, unschedulable=True)

    def uncordon(self, name: str) -> Node:
        return self._put(name, unschedulable=False)

    def annotate_and_cordon(self, name: str, annotations: Mapping[str, str | None]) -> Node:
        self.set_node_annotations(name, annotations)
        return self.cordon(name)

    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> Node:
        current = dict(self.nodes[name].annotations)
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        return self._put(name, annotations=current)

    def add_taint(self, name: str, taint: Taint) -> Node:
        node = self.nodes[name]
        if node.has_taint(taint):
            return node
        return self._put(name, taints=(*node.taints, taint))

    def remove_taint(self, name: str, key: str, effect: str = "NoSchedule") -> Node:
        kept = tuple(t for t in self.nodes[name].taints if t.key != key)
        return self._put(name, taints=kept)

    def create_event(self, *_: object, **__: object) -> None:
        return None

    def fenced(self, name: str) -> bool:
        node = self.nodes[name]
        return node.unschedulable and node.has_taint(QUARANTINE_TAINT)


class Store:
    """The Repository and FenceBook calls the owner makes, over dicts."""

    def __init__(self) -> None:
        self.records: dict[int, RemediationRecord] = {}
        self.decisions_: list[Decision] = []
        self.ids = itertools.count(1)

    def list_open(self) -> tuple[RemediationRecord, ...]:
        return tuple(r for r in self.records.values() if r.is_open)

    def list(self, filters: Any, limit: int = 50) -> Page:
        rows = tuple(r for r in self.records.values() if r.state in filters.states)
        return Page(rows[:limit], None)

    def with_events(self, records: Sequence[RemediationRecord]) -> tuple[RemediationRecord, ...]:
        return tuple(self.records[r.id] for r in records)

    def get(self, remediation_id: int) -> RemediationRecord | None:
        return self.records.get(remediation_id)

    def append_event(self, remediation_id: int, *, action: str, actor: str, detail: Any) -> None:
        rec = self.records[remediation_id]
        line = EventRecord(len(rec.events) + 1, rec.id, T0, None, None, action, dict(detail), actor)
        self.records[remediation_id] = dataclasses.replace(rec, events=(*rec.events, line))

    def move(self, rec: RemediationRecord, target: State, **fields: Any) -> RemediationRecord:
        check_transition(rec.state, target)
        line = EventRecord(
            len(rec.events) + 1, rec.id, T0, rec.state, target, target.value, {}, "c"
        )
        moved = dataclasses.replace(rec, state=target, events=(*rec.events, line), **fields)
        self.records[rec.id] = moved
        return moved

    # FenceBook
    def decisions(self) -> list[Decision]:
        return list(self.decisions_)

    def record(self, node: str, action: FenceAction, *, reason: str, asker: Asker,
               mark: Mapping[str, str] | None = None) -> Decision:  # fmt: skip
        d = Decision(next(self.ids) + 1000, node, action, reason, asker.actor, T0, dict(mark or {}))
        self.decisions_.append(d)
        return d


class FenceMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.kube = Kube()
        self.store = Store()
        self.owner = FenceOwner(
            self.store,  # type: ignore[arg-type]
            self.kube,  # type: ignore[arg-type]
            self.store,  # type: ignore[arg-type]
            actor="controller",
            identity=lambda: ME,
        )
        self.serial = itertools.count(100)
        # Nodes carrying another history's fence that no operator has released or adopted.
        self.foreign: set[str] = set()

    def _present(self) -> list[str]:
        return sorted(self.kube.nodes)

    @rule(data=st.data())
    def open_remediation(self, data: st.DataObject) -> None:
        free = [
            n
            for n in self._present()
            if not any(r.node == n and r.is_open for r in self.store.records.values())
        ]
        if not free:
            return
        node = data.draw(st.sampled_from(free))
        rid = next(self.store.ids)
        rec = build(State.QUARANTINED, (), id=rid, node=node, pool="p")
        self.store.records[rid] = rec
        # The quarantine step: our marks, cordon, taint (unless another history's mark is there).
        if not self.kube.nodes[node].annotations.get(ANN_REMEDIATION_ID):
            marks = {ANN_REMEDIATION_ID: str(rid), **ME.annotations()}
            self.kube.annotate_and_cordon(node, marks)
            self.kube.add_taint(node, QUARANTINE_TAINT)

    @rule(data=st.data())
    def advance(self, data: st.DataObject) -> None:
        movable = [r for r in self.store.records.values() if r.state not in TERMINAL]
        if not movable:
            return
        rec = data.draw(st.sampled_from(sorted(movable, key=lambda r: r.id)))
        targets = sorted(TRANSITIONS[rec.state] | {State.CANCELLED}, key=lambda s: s.value)
        target = data.draw(st.sampled_from(targets))
        fields: dict[str, Any] = {}
        if target is State.VALIDATING and rec.state is State.REPLACING:
            # The replacement: a new machine joins fenced; the old node leaves.
            new = f"new{next(self.serial)}"
            self.kube.nodes[new] = Node(new, uid=new, resource_version="1", created_at=T0)
            self.kube.annotate_and_cordon(
                new, {ANN_REMEDIATION_ID: str(rec.id), **ME.annotations()}
            )
            self.kube.add_taint(new, QUARANTINE_TAINT)
            self.kube.nodes.pop(rec.node, None)
            fields = {"new_node": new, "replacement_operation_id": f"op-{rec.id}"}
        if (
            rec.state is State.VALIDATING
            and target in (State.HELD, State.REPLACING)
            and rec.new_node
        ):
            # A failed burn-in: the controller records the failed machine as a fence.
            self.store.record(
                rec.new_node, FenceAction.FENCE, reason="failed validation",
                asker=Asker("controller", "controller"), mark={"failed_validation": "true"},
            )  # fmt: skip
        if target in (State.UNCORDONING, State.VERIFYING):
            # Those steps lift the fence: the move into them is the decision.
            for node in (rec.node, rec.new_node):
                if node in self.kube.nodes and not self._required(node):
                    self.kube.uncordon(node)
                    self.kube.remove_taint(node, QUARANTINE_TAINT.key)
        self.store.move(rec, target, **fields)

    @rule(data=st.data())
    def human_uncordons(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(self._present()))
        self.kube.uncordon(node)
        if data.draw(st.booleans()):
            self.kube.remove_taint(node, QUARANTINE_TAINT.key)

    @rule(data=st.data())
    def another_history_fences(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(self._present()))
        if self.kube.nodes[node].annotations:
            return
        marks = {ANN_REMEDIATION_ID: str(data.draw(st.integers(1, 50))), **OTHER.annotations()}
        self.kube.annotate_and_cordon(node, marks)
        self.kube.add_taint(node, QUARANTINE_TAINT)
        self.foreign.add(node)

    @rule(data=st.data(), action=st.sampled_from(list(FenceAction)))
    def operator_decides(self, data: st.DataObject, action: FenceAction) -> None:
        node = data.draw(st.sampled_from(self._present()))
        try:
            self.owner.command(
                node, action, reason="on-call", asker=Asker("alice", "t"), node_known=lambda _: True
            )
        except Exception as exc:  # refused: nothing written, which is checked below
            assert type(exc).__name__ == "FenceRefused", exc
            return
        if action in (FenceAction.RELEASE, FenceAction.ADOPT):
            self.foreign.discard(node)

    @rule()
    def reconcile(self) -> None:
        # As the controller does: node_gone first, then the fence owner.
        present = frozenset(self.kube.nodes)
        for rec in gone_ones(
            [r for r in self.store.records.values() if r.is_open or r.state is State.FAILED],
            present,
        ):
            assert not (rec.new_node or rec.replacement_operation_id), (
                f"node_gone would end remediation {rec.id}, whose own replacement took its node"
            )
            self.store.move(rec, State.CANCELLED)
        before = {n: self.kube.fenced(n) for n in self.kube.nodes}
        before_marks = {n: dict(node.annotations) for n, node in self.kube.nodes.items()}
        result = self.owner.reconcile(list(self.kube.nodes.values()))
        for node in result.released:
            assert before[node] or self.kube.nodes[node].annotations == {}
            assert node not in self.foreign, f"{node}: a foreign fence was released by itself"
            assert self._release_decided(node), f"{node}: released without a recorded decision"
        for node in self.foreign & set(self.kube.nodes):
            if before[node]:
                assert self.kube.fenced(node), f"{node}: another history's fence lost"
        for node in self.kube.nodes:
            if self._required(node):
                assert self.kube.fenced(node), f"I1: {node} is due a fence and is not fenced"
        self._no_foreign_mark_claimed(before_marks)

    def _required(self, node: str) -> bool:
        return node in required(self.store.records.values(), self.store.decisions_)

    def _release_decided(self, node: str) -> bool:
        """A finished remediation of ours names the node, or an operator released it."""
        newest = [d for d in self.store.decisions_ if d.node == node]
        if newest and newest[-1].action is FenceAction.RELEASE:
            return True
        return any(
            r.state in TERMINAL and node in (r.node, r.new_node)
            for r in self.store.records.values()
        )

    def _no_foreign_mark_claimed(self, marks: Mapping[str, Mapping[str, str]]) -> None:
        """The pass's view never calls another store's mark ours."""
        for view in self.owner.views():
            if marks.get(view.node, {}).get(ANN_STORE) == OTHER.store:
                assert view.owner is Owner.FOREIGN, view


TestFenceOwner = FenceMachine.TestCase
TestFenceOwner.settings = settings(
    max_examples=1000,
    stateful_step_count=40,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow],
)


def owner_over(kube: Kube, store: Store) -> FenceOwner:
    return FenceOwner(
        store,  # type: ignore[arg-type]
        kube,  # type: ignore[arg-type]
        store,  # type: ignore[arg-type]
        actor="controller",
        identity=lambda: ME,
    )


def test_a_mark_left_by_a_finished_remediation_is_handed_to_the_one_that_needs_the_fence() -> None:
    """Found by the machine above: the node still carried a cancelled remediation's mark when
    a new one held it; a human's uncordon was then never re-asserted (the quarantine refused
    the stale owner's mark)."""
    kube, store = Kube(), Store()
    kube.annotate_and_cordon("n0", {ANN_REMEDIATION_ID: "1", **ME.annotations()})
    kube.add_taint("n0", QUARANTINE_TAINT)
    store.records[1] = build(State.CANCELLED, (), id=1, node="n0")
    store.records[2] = build(State.HELD, (), id=2, node="n0")
    kube.uncordon("n0")
    owner_over(kube, store).reconcile(list(kube.nodes.values()))
    assert kube.fenced("n0")
    assert kube.nodes["n0"].annotations[ANN_REMEDIATION_ID] == "2"


def test_an_operators_release_of_a_foreign_fence_lifts_that_fence_once() -> None:
    """Found by the machine above: the same marks written again after the release were
    released again by the old decision."""
    kube, store = Kube(), Store()
    foreign = {ANN_REMEDIATION_ID: "7", **OTHER.annotations()}
    kube.annotate_and_cordon("n0", foreign)
    kube.add_taint("n0", QUARANTINE_TAINT)
    owner = owner_over(kube, store)
    owner.reconcile(list(kube.nodes.values()))
    owner.command(
        "n0", FenceAction.RELEASE, reason="x", asker=Asker("a", "t"), node_known=lambda _: True
    )
    owner.reconcile(list(kube.nodes.values()))
    assert not kube.fenced("n0")
    kube.annotate_and_cordon("n0", foreign)
    kube.add_taint("n0", QUARANTINE_TAINT)
    owner.reconcile(list(kube.nodes.values()))
    assert kube.fenced("n0"), "a new foreign fence waits for a new decision"
