"""Whose fence is it? Our marks name the remediation (or the operator's decision, or the
quarantined machine) and, since #38, the store that wrote them and the cluster they were written
in. A mark is ours only when this store has the decision it names, about this node: a controller
on another database (a restored backup, a wrong database_url) sees a foreign fence, which it
never releases by itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from remediator.kube.objects import Node, Taint

QUARANTINE_TAINT = Taint("remediator.io/quarantine", "true", "NoSchedule")
ANN_REMEDIATION_ID = "remediator.io/remediation-id"
# A node fenced on arrival because its machine is quarantined (remediation/machine_hold.py): the
# machine's id.
ANN_MACHINE_HOLD = "remediator.io/machine-hold"
# An operator's fence (store/fences.py): the decision's id.
ANN_OPERATOR_FENCE = "remediator.io/operator-fence"
ANN_STORE = "remediator.io/fenced-by-store"
ANN_CLUSTER = "remediator.io/fenced-in-cluster"


@dataclass(frozen=True)
class FenceIdentity:
    """This store's id (store_identity, written with the schema) and the cluster's kube-system
    UID."""

    store: str
    cluster: str

    def annotations(self) -> dict[str, str]:
        return {ANN_STORE: self.store, ANN_CLUSTER: self.cluster}


@dataclass(frozen=True)
class Mark:
    remediation_id: str | None
    machine: str | None
    operator: str | None
    store: str | None
    cluster: str | None
    tainted: bool

    @property
    def present(self) -> bool:
        return bool(self.remediation_id or self.machine or self.operator or self.tainted)

    def as_text(self) -> dict[str, str]:
        """The mark as the node carried it (for the decision that adopts or releases it)."""
        fields = {
            "remediation_id": self.remediation_id,
            "machine": self.machine,
            "operator_fence": self.operator,
            "store": self.store,
            "cluster": self.cluster,
        }
        return {k: v for k, v in fields.items() if v} | ({"taint": "yes"} if self.tainted else {})


def read_mark(node: Node) -> Mark:
    ann = node.annotations
    return Mark(
        remediation_id=ann.get(ANN_REMEDIATION_ID) or None,
        machine=ann.get(ANN_MACHINE_HOLD) or None,
        operator=ann.get(ANN_OPERATOR_FENCE) or None,
        store=ann.get(ANN_STORE) or None,
        cluster=ann.get(ANN_CLUSTER) or None,
        tainted=node.has_taint(QUARANTINE_TAINT),
    )


class Owner(StrEnum):
    NONE = "none"
    OURS = "ours"
    FOREIGN = "foreign"


@dataclass(frozen=True)
class Known:
    """What this store knows, as the classification asks it (pure callables over a snapshot):
    the nodes a remediation of ours is about, whether an operator decision of ours names the
    node, whether our ledger ever quarantined the machine."""

    remediation_nodes: Callable[[int], frozenset[str] | None]
    operator_decision: Callable[[str, str], bool]
    machine_known: Callable[[str], bool]


def owner_of(mark: Mark, node: str, me: FenceIdentity, known: Known) -> tuple[Owner, str]:
    """(owner, why). Every name the mark gives must be this store's and about this node."""
    if not mark.present:
        return Owner.NONE, ""
    if mark.store is not None and mark.store != me.store:
        return Owner.FOREIGN, f"marked by another store ({mark.store})"
    if mark.cluster is not None and mark.cluster != me.cluster:
        return Owner.FOREIGN, f"marked in another cluster (kube-system UID {mark.cluster})"
    if mark.remediation_id is not None:
        nodes = (
            known.remediation_nodes(int(mark.remediation_id))
            if mark.remediation_id.isdigit()
            else None
        )
        if nodes is None:
            return Owner.FOREIGN, (
                f"remediation {mark.remediation_id} is not in this store's history"
            )
        if node not in nodes:
            return Owner.FOREIGN, (
                f"remediation {mark.remediation_id} of this store is about "
                f"{', '.join(sorted(nodes)) or 'another node'}, not {node}"
            )
    if mark.operator is not None and not known.operator_decision(mark.operator, node):
        return Owner.FOREIGN, f"operator fence {mark.operator} is not in this store's history"
    if mark.machine is not None and mark.store is None and not known.machine_known(mark.machine):
        return Owner.FOREIGN, f"machine {mark.machine} is not in this store's ledger"
    if mark.remediation_id is None and mark.operator is None and mark.machine is None:
        return Owner.FOREIGN, "our taint without a mark naming whose it is"
    return Owner.OURS, ""


def stamp_missing(node: Node, me: FenceIdentity) -> Mapping[str, str]:
    """The identity annotations a mark of ours still lacks (written before #38)."""
    return {k: v for k, v in me.annotations().items() if node.annotations.get(k) != v}
