"""The fence owner's pure core: whose mark it is (marks.py), which fences the store requires
(derive.py), what a node needs (plan.py), and which remediations `node_gone` may end."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from remediator.fences.derive import Kind, remediation_nodes, required
from remediator.fences.marks import (
    ANN_CLUSTER,
    ANN_MACHINE_HOLD,
    ANN_OPERATOR_FENCE,
    ANN_REMEDIATION_ID,
    ANN_STORE,
    QUARANTINE_TAINT,
    FenceIdentity,
    Known,
    Owner,
    owner_of,
    read_mark,
)
from remediator.fences.plan import UNCORDONED, UNMARKED, UNTAINTED, plan_node
from remediator.kube.objects import Node
from remediator.model.states import State
from remediator.remediation.node_gone import gone_ones
from remediator.store.fences import Decision, FenceAction
from tests.unit.web.builders import event, record

ME = FenceIdentity("store-a", "uid-1")
T = datetime(2026, 12, 7, tzinfo=UTC)


def node(
    name: str = "gpu-node-1", *, cordoned: bool = True, tainted: bool = True, **ann: str
) -> Node:
    return Node(
        name,
        uid="u",
        resource_version="1",
        annotations=ann,
        unschedulable=cordoned,
        taints=(QUARANTINE_TAINT,) if tainted else (),
    )


def known(
    remediations: dict[int, frozenset[str]] | None = None,
    decisions: dict[str, str] | None = None,
    machines: frozenset[str] = frozenset(),
) -> Known:
    rems = remediations or {}
    ops = decisions or {}
    return Known(
        lambda rid: rems.get(rid),
        lambda did, n: ops.get(did) == n,
        lambda m: m in machines,
    )


def ours(rid: str = "7") -> dict[str, str]:
    return {ANN_REMEDIATION_ID: rid, ANN_STORE: ME.store, ANN_CLUSTER: ME.cluster}


def test_a_node_without_marks_is_nobodys() -> None:
    mark = read_mark(node(cordoned=False, tainted=False))
    assert owner_of(mark, "gpu-node-1", ME, known()) == (Owner.NONE, "")


def test_a_mark_is_ours_only_for_a_remediation_of_this_store_about_this_node() -> None:
    k = known({7: frozenset({"gpu-node-1"})})
    assert owner_of(read_mark(node(**ours())), "gpu-node-1", ME, k)[0] is Owner.OURS
    other_store = {**ours(), ANN_STORE: "store-b"}
    owner, why = owner_of(read_mark(node(**other_store)), "gpu-node-1", ME, k)
    assert owner is Owner.FOREIGN and "another store" in why
    other_cluster = {**ours(), ANN_CLUSTER: "uid-2"}
    assert owner_of(read_mark(node(**other_cluster)), "gpu-node-1", ME, k)[0] is Owner.FOREIGN
    owner, why = owner_of(read_mark(node(**ours("8"))), "gpu-node-1", ME, k)
    assert owner is Owner.FOREIGN and "not in this store's history" in why
    owner, why = owner_of(read_mark(node("gpu-node-2", **ours())), "gpu-node-2", ME, k)
    assert owner is Owner.FOREIGN and "is about gpu-node-1" in why


def test_a_mark_from_before_identity_is_ours_only_when_the_store_knows_it() -> None:
    legacy = {ANN_REMEDIATION_ID: "7"}
    assert owner_of(read_mark(node(**legacy)), "gpu-node-1", ME, known())[0] is Owner.FOREIGN
    k = known({7: frozenset({"gpu-node-1"})})
    assert owner_of(read_mark(node(**legacy)), "gpu-node-1", ME, k)[0] is Owner.OURS
    held = {ANN_MACHINE_HOLD: "i-1"}
    assert owner_of(read_mark(node(**held)), "gpu-node-1", ME, known())[0] is Owner.FOREIGN
    assert (
        owner_of(read_mark(node(**held)), "gpu-node-1", ME, known(machines=frozenset({"i-1"})))[0]
        is Owner.OURS
    )


def test_our_taint_alone_names_nobody_and_is_foreign() -> None:
    owner, why = owner_of(read_mark(node()), "gpu-node-1", ME, known())
    assert owner is Owner.FOREIGN and "without a mark" in why


def test_an_operator_mark_must_name_a_decision_of_this_store_about_this_node() -> None:
    mark = read_mark(node(**{ANN_OPERATOR_FENCE: "3", ANN_STORE: ME.store}))
    assert owner_of(mark, "gpu-node-1", ME, known(decisions={"3": "gpu-node-1"}))[0] is Owner.OURS
    assert owner_of(mark, "gpu-node-1", ME, known(decisions={"3": "x"}))[0] is Owner.FOREIGN


@pytest.mark.parametrize(
    ("state", "due"),
    [
        (State.QUEUED, False),
        (State.DETECTED, False),
        (State.AWAITING_APPROVAL, False),
        (State.QUARANTINED, False),
        (State.HELD_BY_OPT_OUT, True),
        (State.CHECKPOINTING, True),
        (State.DRAINING, True),
        (State.REPLACING, True),
        (State.VALIDATING, True),
        (State.UNCORDONING, False),
        (State.VERIFYING, False),
        (State.HELD, True),
        (State.FAILED, True),
        (State.SUCCEEDED, False),
        (State.CANCELLED, False),
    ],
)
def test_the_fencing_states(state: State, due: bool) -> None:
    assert ("gpu-node-1" in required([record(state)], [])) is due
    assert required([record(state, dry_run=True)], []) == {}, "a dry run fences nothing"


def test_a_held_replacement_fences_its_new_machine_and_its_trays() -> None:
    trays = event(2, 1, None, None, "quarantine_done", {"trays": ["t1", "t2"]})
    due = required([record(State.HELD, (trays,), new_node="new-1")], [])
    assert sorted(due) == ["gpu-node-1", "new-1", "t1", "t2"]
    assert due["new-1"][0].kind is Kind.NEW_MACHINE
    assert remediation_nodes(record(State.HELD, (trays,), new_node="new-1")) == {
        "gpu-node-1",
        "new-1",
        "t1",
        "t2",
    }


def test_a_queued_rack_remediation_fences_every_tray_it_cordoned_while_a_budget_holds_it() -> None:
    """Issue 39 item 2: the queue's cordon of a domain remediation covers all its trays, and
    the owner keeps them (drift re-asserted, never released while queued); not in Slurm, where a
    queued node was never drained. Before its cordon, or while the breaker holds it, none."""
    cordoned = event(2, 1, None, None, "queued_cordon", {"trays": ["gpu-node-1", "t1", "t2"]})
    held = record(State.QUEUED, (cordoned,), queue_cause="budget", while_queued="cordon")
    due = required([held], [])
    assert sorted(due) == ["gpu-node-1", "t1", "t2"]
    assert all(not n.slurm and n.remediation_id == 1 for needs in due.values() for n in needs)
    assert remediation_nodes(held) == {"gpu-node-1", "t1", "t2"}
    assert required([record(State.QUEUED, queue_cause="budget")], []) == {}
    breaker = record(State.QUEUED, (cordoned,), queue_cause="breaker", while_queued="cordon")
    assert required([breaker], []) == {}
    released = event(3, 2, None, None, "queued_release", {"result": "released"})
    assert required([replace(held, events=(cordoned, released))], []) == {}


def decision(i: int, node: str, action: FenceAction, **mark: str) -> Decision:
    return Decision(i, node, action, "why", "alice", T, mark)


def test_the_newest_decision_per_node_stands() -> None:
    fenced = [decision(1, "n", FenceAction.FENCE)]
    assert required([], fenced)["n"][0].kind is Kind.OPERATOR
    released = [*fenced, decision(2, "n", FenceAction.RELEASE)]
    assert required([], released) == {}
    failed = [decision(3, "m", FenceAction.FENCE, failed_validation="true")]
    (need,) = required([], failed)["m"]
    assert need.kind is Kind.FAILED_VALIDATION and need.decision_id == 3


def test_a_due_fence_reports_what_it_lacks() -> None:
    rec = record(State.HELD)
    due = required([rec], [])["gpu-node-1"]
    k = known({1: frozenset({"gpu-node-1"})})
    whole = plan_node(node(**ours("1")), due, ME, k)
    assert whole is not None and whole.drift == () and whole.owner is Owner.OURS
    bare = plan_node(node(cordoned=False, tainted=False), due, ME, k)
    assert bare is not None and bare.drift == (UNCORDONED, UNTAINTED, UNMARKED)
    assert plan_node(node(cordoned=False, tainted=False), [], ME, k) is None


def test_only_our_marks_are_release_candidates() -> None:
    k = known({1: frozenset({"gpu-node-1"})})
    mine = plan_node(node(**ours("1")), [], ME, k)
    assert mine is not None and mine.release_candidate
    theirs = plan_node(node(**{**ours("1"), ANN_STORE: "store-b"}), [], ME, k)
    assert theirs is not None and not theirs.release_candidate
    assert theirs.owner is Owner.FOREIGN


def test_a_legacy_mark_of_ours_is_stamped_with_our_identity() -> None:
    k = known({1: frozenset({"gpu-node-1"})})
    plan = plan_node(node(**{ANN_REMEDIATION_ID: "1"}), [], ME, k)
    assert plan is not None and dict(plan.stamp) == ME.annotations()


def test_node_gone_spares_a_remediation_whose_own_replacement_took_the_node() -> None:
    present = frozenset({"other"})
    held = record(State.HELD, new_node="new-1")
    failed = record(State.FAILED, replacement_operation_id="op-1")
    plain = record(State.HELD)
    assert gone_ones([held, failed, plain], present) == [plain]
