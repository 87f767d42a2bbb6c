"""What a dry-run remediation's ladder would have done, given what really happened after it.

A dry run walks its ladder in seconds and every step "succeeds": it never learns whether a
repair would have held, and the GPU it did not reset keeps what a reset clears. So the shadow
report does not read the dry run's own walk as the outcome:

- a repair (reset_gpu, reboot, diagnose) would have held unless the same GPU (the node, when the
  remediation names no GPU) raised a new fault within RECOVERY_WINDOW after it; only then does
  the ladder's fallback (`on_failure: replace` or a named ladder) count as run;
- a remediation whose every signal is a row remap pending on a GPU an earlier dry run would have
  reset (or rebooted), with no other fault of that GPU in between, exists only because the dry
  run did not act: it is a dry-run artefact, counted apart and evidence of nothing;
- the time a step takes is the median of the real (not dry-run) remediations that ran it; a
  step no real remediation ran cannot be modelled, and the report says so.

Pure: records with their events in, values out.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from remediator.model.states import STEP_STATES, State
from remediator.signals.maintenance import ROW_REMAP_PENDING
from remediator.signals.model import SignalKind
from remediator.store.records import RemediationRecord

RECOVERY_WINDOW = timedelta(hours=24)
REPAIRS = ("reset_gpu", "reboot", "diagnose")
STATE_STEP: Mapping[State, str] = {
    **{state: step for step, state in STEP_STATES.items() if step != "taint"},
    State.VERIFYING: "verify",
}
# What a ladder did, most consequential first: a remediation is counted under the first it ran.
WEIGHT = ("replace", "rma", "reboot", "reset_gpu", "diagnose", "drain", "cordon", "notify")


@dataclass(frozen=True)
class Verdict:
    remediation_id: int
    node: str
    policy: str
    at: datetime
    action: str  # the most consequential step it would have run (WEIGHT), or its last one
    steps: tuple[str, ...]  # the steps it would have run, fallbacks included when taken
    fallback: bool  # a repair would not have held and the fallback would have run
    why: str


@dataclass(frozen=True)
class Artefact:
    remediation_id: int
    node: str
    policy: str
    at: datetime
    what: str


def gpus_of(record: RemediationRecord) -> frozenset[int]:
    """The GPUs a remediation names (empty: the whole node)."""
    return frozenset(s.gpu for s in record.signals if s.gpu is not None)


def _touches(a: frozenset[int], b: frozenset[int]) -> bool:
    return not a or not b or bool(a & b)


def _main(record: RemediationRecord) -> list[str]:
    return [str(s.get("action", "")) for s in record.ladder if not s.get("fallback")]


def _fallback(record: RemediationRecord) -> list[str]:
    return [str(s.get("action", "")) for s in record.ladder if s.get("fallback")]


def _acted(record: RemediationRecord) -> bool:
    """It left the queue and got past its decision (a queued or cancelled one did nothing)."""
    return any(
        e.to_state is not None and e.to_state not in (State.QUEUED, State.DETECTED, State.CANCELLED)
        for e in record.events
    )


def walked(record: RemediationRecord) -> list[str]:
    """The main steps the dry run walked: those whose state it entered, and the stateless ones
    (notify) once it acted at all."""
    if not _acted(record):
        return []
    entered = {e.to_state for e in record.events if e.to_state is not None}
    done = record.state is State.SUCCEEDED
    return [
        s for s in _main(record) if done or STEP_STATES.get(s) in entered or s not in STEP_STATES
    ]


def _clears(record: RemediationRecord) -> frozenset[int] | None:
    """The GPUs a dry run's walk would have reset (empty: all of them, a reboot); None: none."""
    steps = walked(record)
    if "reboot" in steps:
        return frozenset()
    if "reset_gpu" in steps:
        return gpus_of(record)
    return None


def _pending_only(record: RemediationRecord) -> bool:
    return bool(record.signals) and all(
        s.kind is SignalKind.MAINTENANCE and s.labels.get("code") == ROW_REMAP_PENDING
        for s in record.signals
    )


def artefacts(ordered: Sequence[RemediationRecord]) -> dict[int, Artefact]:
    """remediation id → why it is a dry-run artefact (`ordered`: by creation)."""
    found: dict[int, Artefact] = {}
    for index, record in enumerate(ordered):
        if not record.dry_run or not _pending_only(record):
            continue
        gpus = gpus_of(record)
        cause = next(
            (
                o
                for o in reversed(ordered[:index])
                if o.node == record.node and o.id not in found and _touches(gpus_of(o), gpus)
            ),
            None,
        )
        clears = _clears(cause) if cause is not None and cause.dry_run else None
        if cause is None or clears is None or not _touches(clears, gpus):
            continue
        shown = ", ".join(str(g) for g in sorted(gpus)) or "all"
        verb = "reboot" if not clears else "GPU reset"
        found[record.id] = Artefact(
            record.id,
            record.node,
            record.policy,
            record.created_at,
            f"row remap pending on GPU {shown} of {record.node}: the {verb} of #{cause.id} "
            f"({cause.policy}), which the dry run did not do, would have cleared it",
        )
    return found


def verdict(
    record: RemediationRecord, ordered: Sequence[RemediationRecord], skip: Iterable[int]
) -> Verdict:
    """What `record`'s ladder would have done: its walk, and its fallback only when a repair
    in it would not have held (a new fault of its GPU within RECOVERY_WINDOW, not an artefact)."""
    steps = walked(record)
    repaired = [s for s in steps if s in REPAIRS]
    fallback = _fallback(record)
    why = ""
    failed = False
    if repaired and fallback:
        ended = record.finished_at or record.updated_at
        ignored = set(skip)
        gpus = gpus_of(record)
        again = next(
            (
                o
                for o in ordered
                if o.node == record.node
                and o.id != record.id
                and o.id not in ignored
                and record.created_at < o.created_at <= ended + RECOVERY_WINDOW
                and _touches(gpus_of(o), gpus)
            ),
            None,
        )
        if again is None:
            hours = RECOVERY_WINDOW.total_seconds() / 3600
            why = (
                f"its GPU raised no new fault within {hours:g}h: the {repaired[0]} would have held"
            )
        else:
            failed = True
            steps = [s for s in steps if s not in ("uncordon",)] + fallback
            why = (
                f"a new fault of the same GPU at {again.created_at.isoformat()} (#{again.id}, "
                f"{again.policy}): the {repaired[0]} would not have held, so the fallback "
                f"({', '.join(fallback)}) would have run"
            )
    action = next((w for w in WEIGHT if w in steps), steps[-1] if steps else "nothing")
    return Verdict(
        record.id,
        record.node,
        record.policy,
        record.created_at,
        action,
        tuple(steps),
        failed,
        why,
    )


class Durations:
    """The median time the real (not dry-run) remediations spent in each work state."""

    def __init__(self, records: Iterable[RemediationRecord]) -> None:
        spent: dict[State, list[float]] = {}
        for record in records:
            if record.dry_run:
                continue
            moves = [e for e in record.events if e.to_state is not None]
            for entry, leave in pairwise(moves):
                state = entry.to_state
                if state is not None and state in STATE_STEP and leave.from_state is state:
                    seconds = (leave.at - entry.at).total_seconds()
                    spent.setdefault(state, []).append(max(0.0, seconds))
        self._median = {state: statistics.median(s) for state, s in spent.items()}

    def states(self, steps: Sequence[str]) -> list[State]:
        """The work states `steps` pass through, in order (a replacement is then verified)."""
        found: list[State] = []
        for step in steps:
            state = STEP_STATES.get(step)
            if state is not None and state not in found:
                found.append(state)
        if State.REPLACING in found:
            found.append(State.VERIFYING)
        return found

    def seconds(self, steps: Sequence[str]) -> tuple[float | None, tuple[str, ...]]:
        """How long a node would have been out for these steps, or None and the steps no real
        remediation ran."""
        states = self.states(steps)
        missing = tuple(STATE_STEP[s] for s in states if s not in self._median)
        if missing:
            return None, missing
        return sum(self._median[s] for s in states), ()
