"""The queue's cordon (`while_queued: cordon`) on every tray a queued remediation would hold: its
node alone, or every tray of its clique or domain (remediation/steps/domain.py `members`), so a
queued rack takes no new work on any tray while it waits (issue 39). The trays go on the
`queued_cordon` line, from which the fence owner derives them (fences/derive.py) and keeps them
fenced until the queue releases them or the remediation ends."""

from __future__ import annotations

from remediator.actions.outcome import Done, Outcome
from remediator.actions.quarantine import Why
from remediator.fences.derive import trays_of
from remediator.fences.fencer import Fencer
from remediator.remediation.steps.domain import all_trays
from remediator.store.records import RemediationRecord


def fence_unit(fencer: Fencer, trays: tuple[str, ...], why: Why) -> Outcome:
    """Fence every tray (the remediation's node first) through the fence owner."""
    return _named(trays, all_trays(trays, [fencer.fence(tray, why) for tray in trays]))


def release_unit(fencer: Fencer, record: RemediationRecord) -> Outcome:
    """Lift the queue's cordon from the node and every tray a `queued_cordon` line named; the
    owner refuses a tray something else still requires (that outcome is returned)."""
    trays = tuple(dict.fromkeys((record.node, *trays_of(record))))
    return _named(trays, all_trays(trays, [fencer.unfence(t, str(record.id)) for t in trays]))


def _named(trays: tuple[str, ...], outcome: Outcome) -> Outcome:
    """A unit's line names its trays even when the lead's outcome was the only one."""
    if isinstance(outcome, Done) and len(trays) > 1 and "trays" not in outcome.facts:
        return Done(outcome.detail, {**outcome.facts, "trays": list(trays)})
    return outcome
