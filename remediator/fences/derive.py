"""Which nodes must be fenced, derived from the store alone (pure): the level the reconciler
drives the cluster and Slurm to every poll, whatever event brought it there.

A node is due a fence when
* a remediation of ours is past its quarantine and not yet returning the node (the fencing
  states), or is held or failed: its node, the trays it fenced with it, and its new machine;
* a new machine is on trial (validating);
* an operator fenced it or adopted a foreign fence (the newest decision for the node);
* a machine failed validation: kept until an operator releases it, even after its remediation
  was cancelled (the controller records that as an operator-grade decision, store/fences.py).

UNCORDONING and VERIFYING are not fencing states: their step is lifting the fence, a decision
already recorded by the transition into them. QUARANTINED is the quarantine step's own (it
fences, idempotently, before the remediation moves on). QUEUED is the queue's (while_queued):
once the queue's cordon is on (its `queued_cordon` line names the node and, for a clique or
domain remediation, every tray of its unit) it is due while a budget holds the remediation, in
Kubernetes only (a queued node was never drained in Slurm).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from remediator.kube.objects import Node
from remediator.model.states import State
from remediator.store.fences import Decision, FenceAction
from remediator.store.records import RemediationRecord

FENCING_STATES = frozenset(
    {
        State.HELD_BY_OPT_OUT,
        State.CHECKPOINTING,
        State.DRAINING,
        State.RESETTING_GPU,
        State.REBOOTING,
        State.DIAGNOSING,
        State.OPENING_RMA,
        State.REPLACING,
        State.VALIDATING,
        State.HELD,
        State.FAILED,
    }
)
# States whose new machine (record.new_node) stays fenced: on trial, or failed and waiting.
NEW_MACHINE_STATES = frozenset({State.VALIDATING, State.HELD, State.FAILED})
# A rack operation's request (remediation/steps/domain.py RACK_REQUESTED).
RACK_REQUESTED = "rack_operation_requested"
# The queue's cordon and its release (remediation/service.py, while_queued).
QUEUED_CORDON = "queued_cordon"
QUEUED_RELEASE = "queued_release"
# A queued remediation's hold cause whose queue keeps the node fenced (policy/budget.py BUDGET).
BUDGET_HOLD = "budget"
# Timeline lines that name trays fenced with the node (the quarantine step's; a rack request;
# the queue's cordon).
TRAY_LINES = frozenset({"quarantine_done", RACK_REQUESTED, QUEUED_CORDON})


class Kind(StrEnum):
    REMEDIATION = "remediation"
    NEW_MACHINE = "new_machine"
    OPERATOR = "operator"
    FAILED_VALIDATION = "failed_validation"


@dataclass(frozen=True)
class Required:
    """One reason a node must be fenced. `remediation_id` names the remediation whose timeline
    hears of its drift (None for an operator's fence)."""

    node: str
    kind: Kind
    reason: str
    remediation_id: int | None = None
    policy: str = ""
    # The operator's decision (store/fences.py) that requires it; None for a remediation's.
    decision_id: int | None = None
    # The machine a failed validation is about (the Node's metadata.uid and providerID then): a
    # new machine under the name (a rack's new tray in its slot) is not what the fence is for.
    node_uid: str = ""
    provider_id: str = ""
    # Whether the fence is due in Slurm too (a drain): not for the queue's cordon.
    slurm: bool = True

    def applies_to(self, node: Node) -> bool:
        same_object = not self.node_uid or self.node_uid == node.uid
        return same_object and (not self.provider_id or self.provider_id == node.provider_id)


def trays_of(record: RemediationRecord) -> tuple[str, ...]:
    """The trays a rack or clique remediation fenced with its node (its quarantine line, its
    last rack request)."""
    trays: list[str] = []
    for event in record.events:
        named = event.detail.get("trays") if event.action in TRAY_LINES else None
        if isinstance(named, list):
            trays.extend(str(t) for t in named)
    return tuple(dict.fromkeys(trays))


def remediation_nodes(record: RemediationRecord) -> frozenset[str]:
    """Every node a remediation may have marked: its own, its trays, its new machines."""
    named = {record.node, *trays_of(record)}
    if record.new_node:
        named.add(record.new_node)
    for event in record.events:
        for key in ("new_node", "replaced_again", "node"):
            value = event.detail.get(key)
            if isinstance(value, str) and value:
                named.add(value)
    return frozenset(named)


def validated_nodes(record: RemediationRecord, detail: Mapping[str, object]) -> list[str]:
    """The nodes a validation line judged: a rack's trays, each with its verdict, else its one
    node."""
    trays = detail.get("trays")
    if isinstance(trays, list) and trays and all(isinstance(t, Mapping) for t in trays):
        return [str(t.get("node")) for t in trays if t.get("passed") and t.get("node")]
    return [failed_machine(record, detail)]


def failed_machine(record: RemediationRecord, detail: Mapping[str, object]) -> str:
    """The machine a failed validation is about: the one replaced again, else the node the
    check ran on, else the new machine (or the repaired node) of the remediation."""
    for key in ("replaced_again", "node"):
        value = detail.get(key)
        if isinstance(value, str) and value:
            return value
    return record.new_node or record.node


def replacement_requested(record: RemediationRecord) -> bool:
    """Replacing, and the provider was asked: the old machines are going, and what joins under
    their names (a rack's trays keep their slots' names) is new, fenced by its own validation
    step if the ladder validates, else meant to serve as it comes."""
    if record.state is not State.REPLACING:
        return False
    if record.replacement_operation_id:
        return True
    return any(
        e.action == RACK_REQUESTED and e.detail.get("action") == "replace" for e in record.events
    )


def last_queued_action(record: RemediationRecord) -> str | None:
    """The last cordon or release done for a queued remediation (QUEUED_CORDON or
    QUEUED_RELEASE); None when neither happened."""
    for event in reversed(record.events):
        if event.action in (QUEUED_CORDON, QUEUED_RELEASE):
            return event.action
    return None


def of_queued(record: RemediationRecord) -> list[Required]:
    """The queue's cordon, while a budget holds the remediation and the cordon is on."""
    if (
        record.dry_run
        or record.queue_cause != BUDGET_HOLD
        or last_queued_action(record) != QUEUED_CORDON
    ):
        return []
    why = f"remediation {record.id} is queued: {record.hold_reason or 'waiting for budget'}"
    return [
        Required(node, Kind.REMEDIATION, why, record.id, record.policy, slurm=False)
        for node in dict.fromkeys((record.node, *trays_of(record)))
    ]


def of_remediation(record: RemediationRecord) -> list[Required]:
    if record.state is State.QUEUED:
        return of_queued(record)
    if record.dry_run or record.state not in FENCING_STATES:
        return []
    why = f"remediation {record.id} is {record.state.value}"
    own = () if replacement_requested(record) else (record.node, *trays_of(record))
    found = [Required(node, Kind.REMEDIATION, why, record.id, record.policy) for node in own]
    if record.new_node and record.state in NEW_MACHINE_STATES:
        trial = "on trial" if record.state is State.VALIDATING else f"of a {record.state.value} one"
        found.append(
            Required(
                record.new_node,
                Kind.NEW_MACHINE,
                f"new machine {trial} (remediation {record.id})",
                record.id,
                record.policy,
            )
        )
    return found


def of_decisions(decisions: Iterable[Decision]) -> list[Required]:
    """The newest decision per node stands: a fence or an adoption keeps it fenced."""
    newest: dict[str, Decision] = {}
    for decision in decisions:
        newest[decision.node] = decision
    return [
        Required(
            d.node,
            Kind.FAILED_VALIDATION if d.mark.get("failed_validation") else Kind.OPERATOR,
            f"{d.action.value} by {d.actor}: {d.reason}",
            decision_id=d.id,
            node_uid=d.mark.get("node_uid", ""),
            provider_id=d.mark.get("provider_id", ""),
        )
        for d in newest.values()
        if d.action in (FenceAction.FENCE, FenceAction.ADOPT)
    ]


def required(
    records: Iterable[RemediationRecord], decisions: Iterable[Decision]
) -> dict[str, list[Required]]:
    """Node → every reason it must be fenced (empty nodes absent)."""
    due: dict[str, list[Required]] = {}
    for need in [*(r for rec in records for r in of_remediation(rec)), *of_decisions(decisions)]:
        due.setdefault(need.node, []).append(need)
    return due
