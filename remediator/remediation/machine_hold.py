"""Quarantined machines (issue #28, docs/ledger.md): the executor around the pure rule of
ledger/hold.py. Not the fence step (steps/quarantine.py cordons and taints a node for one
remediation): this holds the hardware, whatever node name it has next, until an operator lifts it.

It watches committed transitions (the service's `on_transition`, so each is seen once, after it
is on the timeline): a replacement takes a machine out (a strike), a validation verdict is
linked to the machine and the GPUs it names (a failure is a strike) and its inventory gives the
GPUs' serials, VBIOS and driver (ledger/inventory.py), a diagnosis verdict to the GPUs it names.
When the strikes reach `machine_hold.count` within `machine_hold.within` the machine is
quarantined in the ledger and held where its provider keeps it:

* Cluster API: the Machine and the Metal3 BareMetalHost marked (providers/clusterapi.py);
* bare metal, the node-pool HTTP API: the node is left fenced: the uncordon and verify steps
  hold with the quarantine's reason instead of returning it (`hold_reason`), and neither a
  cancel nor the reconcile releases it (commands.kept_fenced, RemediationService.reconcile);
* AWS, GCE: the replaced instance is gone anyway; the ledger's record is what remains.

Whatever the provider, a quarantined machine found under any node name is fenced on arrival
(`fence_arrivals`, decided by ledger/hold.py's `fences_due`); on bare metal, by the DMI serial
its agent's first heartbeat names (ledger/sightings.py), before any fault."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from remediator.actions.quarantine import ANN_MACHINE_HOLD, ANN_PRIOR_CORDON, QUARANTINE_TAINT
from remediator.clock import Clock
from remediator.errors import NotFoundError, RemediatorError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node, ObjectRef
from remediator.ledger.hold import (
    ArrivalFence,
    HoldDecision,
    NodeSeen,
    arrival_machine,
    fences_due,
    hold_due,
)
from remediator.ledger.identity import behind, brought_by, lineage, machine_id, rank
from remediator.ledger.inventory import inventory_gpus
from remediator.ledger.store import VALIDATE, Ledger
from remediator.policy.schema import MachineHoldSettings
from remediator.providers import clusterapi
from remediator.remediation.service import TransitionSeen
from remediator.remediation.steps.context import replaced_node, replacements
from remediator.store.records import RemediationRecord
from remediator.store.repository import Repository

log = logging.getLogger(__name__)

HELD_EVENT = "machine_held"
FENCED_REASON = "RemediatorMachineHold"  # the Event on a node fenced on arrival
CLUSTERAPI = "clusterapi"


def hold_text(machine: str, reason: str) -> str:
    """The hold reason a step gives for a node on a quarantined machine."""
    return (
        f"quarantined machine {machine}: {reason}; it stays fenced and is not returned to its "
        f"pool until an operator lifts the quarantine (/machines/{machine})"
    )


def failed_gpus(tests: Iterable[Mapping[str, Any]]) -> dict[int, list[str]]:
    """GPU index → the failed DCGM tests that name it (dcgm.TestVerdict.to_json rows)."""
    out: dict[int, list[str]] = {}
    for test in tests:
        if str(test.get("status", "")).lower() != "fail":
            continue
        for part in str(test.get("gpu", "")).replace(",", " ").split():
            if part.isdigit():
                out.setdefault(int(part), []).append(str(test.get("test")))
    return out


def _dcgm_failures(checks: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    rows: list[Mapping[str, Any]] = []
    for check in checks:
        failed = check.get("failed")  # burnin.dcgm_verdict's evidence, flat in the line
        if isinstance(failed, list):
            rows.extend(r for r in failed if isinstance(r, Mapping))
    return rows


class MachineHolds:
    def __init__(
        self,
        ledger: Ledger,
        kube: KubeClient,
        repo: Repository,
        clock: Clock,
        *,
        settings: Callable[[], MachineHoldSettings],
        provider_kind: Callable[[str | None], str],
        actor: str,
    ) -> None:
        self._ledger = ledger
        self._kube = kube
        self._repo = repo
        self._clock = clock
        self._settings = settings
        self._provider_kind = provider_kind
        self._actor = actor

    # --- what the steps ask ------------------------------------------------------------------

    def hold_on(self, node: str) -> str | None:
        """The hold reason when the machine behind `node` is quarantined, else None."""
        held = self._ledger.hold_on(node, self._current(node))
        return hold_text(*held) if held is not None else None

    def _current(self, node: str) -> str | None:
        """The machine behind `node` now (`_behind`), read from the cluster; the ledger's
        picture when the node is gone."""
        try:
            return self._behind(self._kube.get_node(node))
        except NotFoundError:
            return self._ledger.machine_of(node)

    def _behind(self, node: Node) -> str | None:
        """The Node's own id when it is a cloud's instance id (fresher than the picture when an
        instance was just recreated under the name); else the agent's DMI serial in the ledger's
        picture (the bare-metal truth); else the Node's providerID, or the picture: the machine a
        replacement brought under a providerID that outlives its trays (identity.behind)."""
        return behind(
            self._ledger.machine_of(node.name), machine_id(node.provider_id, node.annotations)
        )

    # --- what the nodes tell -------------------------------------------------------------------

    def fence_arrivals(self, nodes: Iterable[Node]) -> list[str]:
        """Fence each node found on a quarantined machine (a host put back by hand, under a
        new name): cordon and taint as the fence step does, with an Event naming the
        quarantine and a `fenced` line in the machine's history; never an uncordon (the
        reconcile keeps such a node fenced until the lift). Decided by `hold.fences_due`.
        Returns the nodes fenced."""
        quarantined, fenced = self._ledger.quarantine_state()
        if not quarantined:
            return []
        # A heartbeat naming the DMI serial may have reached another replica: its database
        # row, not only this replica's picture.
        latest = self._ledger.latest_under(quarantined)
        seen = [
            NodeSeen(n.name, machine, n.unschedulable, n.has_taint(QUARANTINE_TAINT))
            for n in nodes
            if (machine := arrival_machine(latest.get(n.name), self._behind(n))) in quarantined
        ]
        done: list[str] = []
        for order in fences_due(seen, quarantined, fenced):
            try:
                self._fence(order)
            except RemediatorError as exc:
                log.warning(
                    "fence of %s (quarantined machine %s) failed: %s",
                    order.node,
                    order.machine,
                    exc,
                    extra={"node": order.node},
                )
                continue
            done.append(order.node)
        return done

    def _fence(self, order: ArrivalFence) -> None:
        text = hold_text(order.machine, order.reason)
        # The mark names the fence ours; a cordon found there is a human's, which the release
        # after the lift must leave.
        marks = {ANN_MACHINE_HOLD: order.machine}
        if order.cordon:
            self._kube.annotate_and_cordon(order.node, marks)
        else:
            self._kube.set_node_annotations(order.node, {**marks, ANN_PRIOR_CORDON: "true"})
        node = self._kube.add_taint(order.node, QUARANTINE_TAINT) if order.taint else None
        about = ObjectRef.of_node(node or self._kube.get_node(order.node))
        self._kube.create_event(about, FENCED_REASON, f"Fenced on arrival: {text}", "Warning")
        steps = [s for s, due in (("cordon", order.cordon), ("taint", order.taint)) if due]
        self._ledger.note_fenced(
            order.machine,
            order.node,
            self._clock.now(),
            {"reason": order.reason, "steps": steps, "actor": self._actor},
        )
        log.warning(
            "node %s fenced: it runs on quarantined machine %s",
            order.node,
            order.machine,
            extra={"node": order.node},
        )

    # --- what the transitions tell -----------------------------------------------------------

    def on_transition(self, seen: TransitionSeen) -> None:
        """Never lets a ledger or API error undo a committed transition: logged, not raised."""
        try:
            self._seen(seen)
        except (RemediatorError, SQLAlchemyError) as exc:
            log.warning(
                "hardware ledger: %s not recorded: %s",
                seen.action,
                exc,
                extra={"remediation_id": seen.after.id, "node": seen.after.node},
            )

    def _seen(self, seen: TransitionSeen) -> None:
        record, detail, now = seen.after, seen.detail, self._clock.now()
        if record.dry_run:
            return
        if seen.action == "replace_done":
            node = replaced_node(seen.before)
            earlier = replacements(seen.before)
            # The machine taken out: the one the remediation was opened on (the name may
            # already stand for the new instance), or the new machine that failed validation
            # (the one the last replacement brought, under whatever name).
            opened_on = self._ledger.machines_of_remediations([record.id]).get(record.id)
            first = node == record.node and not earlier
            machine = opened_on if first and opened_on else self._machine(node, now)
            if machine is not None:
                facts = {"new_node": record.new_node, "policy": record.policy}
                self._ledger.link_replacement(record.id, node, machine, now, facts)
                self._decide(machine, node, record, now)
            if record.new_node == node:
                self._brought(record, node, machine, earlier + 1, now)
        elif seen.action in ("validate_done", "validate_failed"):
            node = str(detail.get("node") or record.new_node or record.node)
            passed = seen.action == "validate_done"
            machine = self._machine(node, now)
            self._inventory(node, detail, now)
            checks = [c for c in detail.get("checks") or () if isinstance(c, Mapping)]
            self._verdicts(record, node, machine, VALIDATE, passed, detail, _dcgm_failures(checks))
            if not passed and machine is not None:
                self._decide(machine, node, record, now)
        elif seen.action in ("diagnose_done", "diagnose_failed"):
            node = str(detail.get("node") or record.node)
            tests = [t for t in detail.get("tests") or () if isinstance(t, Mapping)]
            passed = seen.action == "diagnose_done"
            self._verdicts(
                record, node, self._machine(node, now), "diagnose", passed, detail, tests
            )

    def _brought(
        self,
        record: RemediationRecord,
        node: str,
        replaced: str | None,
        replacement: int,
        now: datetime,
    ) -> None:
        """A replacement that kept the node's name: when nothing but a providerID names the
        machine (the node-pool API's tray comes back in its slot under the slot's name and
        providerID), what joined is new hardware the controller asked for, so a machine of its
        own (identity.brought_by), not the tray before with its strikes and reboots. A cloud's
        instance id or the agent's DMI serial tells the new machine apart by itself."""
        try:
            found = self._kube.get_node(node)
            own = machine_id(found.provider_id, found.annotations)
            provider_id: str | None = found.provider_id or None
        except NotFoundError:
            own = lineage(replaced) if replaced is not None else None
            provider_id = None
        if own is None or rank(own) != 0 or (replaced is not None and rank(replaced) != 0):
            return
        new = brought_by(own, record.id, replacement)
        self._ledger.observe_machine(node, new, now, provider_id=provider_id)
        log.info(
            "%s: replacement %d of remediation #%d brought machine %s",
            node,
            replacement,
            record.id,
            new,
            extra={"remediation_id": record.id, "node": node},
        )

    def _inventory(self, node: str, detail: Mapping[str, Any], now: datetime) -> None:
        """The validation's nvidia-smi inventory: the GPUs' serials, VBIOS and driver (passed or
        not), before the verdicts that name them. Its failure is logged, never in the way of
        the verdicts and the strike decision after it."""
        if gpus := inventory_gpus(detail):
            try:
                self._ledger.observe_gpus(node, gpus, now)
            except SQLAlchemyError as exc:
                log.warning(
                    "hardware ledger: inventory of %s not recorded: %s",
                    node,
                    exc,
                    extra={"node": node},
                )

    def _verdicts(
        self,
        record: RemediationRecord,
        node: str,
        machine: str | None,
        step: str,
        passed: bool,
        detail: Mapping[str, Any],
        tests: list[Mapping[str, Any]],
    ) -> None:
        """One link per GPU a failed test names (by UUID, from where the ledger placed it),
        and one for the machine: the verdict on the GPU pages and the machine page."""
        now = self._clock.now()
        reason = str(detail.get("reason") or detail.get("result") or "")
        base: dict[str, Any] = {"step": step, "remediation_id": record.id, "reason": reason}
        for index, names in sorted(failed_gpus(tests).items()):
            uuid = self._ledger.gpu_at(node, None, index, now)
            if uuid is not None:
                facts = {**base, "gpu_index": index, "tests": names}
                self._ledger.link_verdict(node, uuid, False, now, facts, machine=machine)
        if machine is not None:
            self._ledger.link_verdict(node, None, passed, now, base, machine=machine)

    def _machine(self, node: str, now: datetime) -> str | None:
        """The machine behind `node` now (`_current`); one the intake has not seen yet is put
        in the ledger here, so that its strike and quarantine have a row."""
        machine = self._current(node)
        if machine is not None and machine != self._ledger.machine_of(node):
            self._ledger.observe_machine(node, machine, now)
        return machine

    def _decide(self, machine: str, node: str, record: RemediationRecord, now: datetime) -> None:
        settings = self._settings()
        if settings.count <= 0:
            return
        decision = hold_due(
            machine,
            self._ledger.strikes(machine, now - settings.within),
            count=settings.count,
            within=settings.within,
            now=now,
            lifted_at=self._ledger.hold_lifted_at(machine),
        )
        if decision is None:
            return
        reason = f"remediation #{record.id}: {decision.reason}"
        if not self._ledger.quarantine(
            machine, reason, now, remediation_id=decision.remediation_id, node=node
        ):
            return  # quarantined already
        marked = self._enforce(decision, node, record)
        self._repo.append_event(
            record.id,
            action=HELD_EVENT,
            actor=self._actor,
            detail={
                "machine": machine,
                "node": node,
                "reason": reason,
                "strikes": len(decision.strikes),
                "marked": marked,
            },
        )
        log.warning(
            "machine %s quarantined: %s",
            machine,
            reason,
            extra={"remediation_id": record.id, "node": node},
        )

    def _enforce(self, decision: HoldDecision, node: str, record: RemediationRecord) -> list[str]:
        """Where the provider keeps the machine (module docstring); the steps read the ledger
        for the rest."""
        if self._provider_kind(record.pool) != CLUSTERAPI:
            return []
        try:
            found = self._kube.get_node(node)
            provider_id, annotations = found.provider_id, found.annotations
        except NotFoundError:
            life = self._ledger.machine(decision.machine)
            provider_id = (life.provider_id if life is not None else None) or ""
            annotations = {}
        return clusterapi.hold_machine(self._kube, node, provider_id, annotations, decision.reason)
