"""One node's fence, compared both ways (pure): what the store requires (derive.py) against what
the node carries (marks.py) → keep, re-assert what is missing, release, or report a foreign fence.

A release is only ever a candidate here: the executor lifts a fence only on a decision this
store recorded (a finished remediation of ours, a lifted machine hold, an operator's release)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from remediator.fences.derive import Required
from remediator.fences.marks import FenceIdentity, Known, Mark, Owner, owner_of, read_mark
from remediator.kube.objects import Node

UNCORDONED = "uncordoned"
UNTAINTED = "untainted"
UNMARKED = "unmarked"
SLURM_RESUMED = "slurm_resumed"
DRIFT_KINDS = (UNCORDONED, UNTAINTED, UNMARKED, SLURM_RESUMED)


@dataclass(frozen=True)
class NodePlan:
    node: str
    mark: Mark
    owner: Owner
    needs: tuple[Required, ...] = ()
    # What a due fence lacks on the node (UNCORDONED, UNTAINTED, UNMARKED).
    drift: tuple[str, ...] = ()
    # Not required, and the mark is ours: lifted if the store recorded the decision.
    release_candidate: bool = False
    # Identity annotations a mark of ours still lacks.
    stamp: Mapping[str, str] = field(default_factory=dict)
    foreign_why: str = ""


def marked(mark: Mark) -> bool:
    return bool(mark.remediation_id or mark.operator or mark.machine)


def drift_of(node: Node, mark: Mark) -> tuple[str, ...]:
    found = []
    if not node.unschedulable:
        found.append(UNCORDONED)
    if not mark.tainted:
        found.append(UNTAINTED)
    if not marked(mark):
        found.append(UNMARKED)
    return tuple(found)


def plan_node(
    node: Node, needs: Sequence[Required], me: FenceIdentity, known: Known
) -> NodePlan | None:
    """None when there is nothing to look at (no fence due, no mark)."""
    mark = read_mark(node)
    if not needs and not mark.present:
        return None
    owner, why = owner_of(mark, node.name, me, known)
    stamp: Mapping[str, str] = {}
    if owner is Owner.OURS:
        stamp = {k: v for k, v in me.annotations().items() if node.annotations.get(k) != v}
    if needs:
        return NodePlan(
            node.name, mark, owner, tuple(needs), drift_of(node, mark), stamp=stamp, foreign_why=why
        )
    return NodePlan(
        node.name,
        mark,
        owner,
        release_candidate=owner is Owner.OURS,
        stamp=stamp,
        foreign_why=why,
    )


def plan_all(
    nodes: Sequence[Node],
    due: Mapping[str, Sequence[Required]],
    me: FenceIdentity,
    known: Known,
) -> list[NodePlan]:
    plans = (
        plan_node(n, [r for r in due.get(n.name, ()) if r.applies_to(n)], me, known) for n in nodes
    )
    return [p for p in plans if p is not None]
