"""What the controller would have done over a window of dry-run history, as a team reads it
before switching dry-run off: remediations by policy and pool, what each ladder would have done,
the nodes it would have fenced and the GPU-hours that would have cost, the decisions budgets, the
breaker or a pause held, the breaker's trips, and the decisions a person might disagree with.

A pure function of the recorded remediations (with their timelines): nothing is re-decided here.
What a ladder would have done is read against what really happened after it (shadow/would_have.py):
a fallback counts only when its repair would not have held, remediations that exist only because
the dry run did not act are dry-run artefacts, and GPU-hours are modelled from real step
durations or said to be unmodelled. Disagreements are flagged, not judged:
- a planned replace where a reboot was enough later: the node would have been replaced, and a
  later fault on the same node (still there: nothing was replaced) went to a repair ladder;
- a replace on a node's first fault for an XID whose NVIDIA catalog action is a reset or reboot;
- a node fenced three or more times in the window: the signal or its threshold may flap;
- a decision a workload's opt-out would have held.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from remediator.model.states import State
from remediator.shadow.would_have import Artefact, Durations, Verdict, artefacts, verdict
from remediator.signals import xid
from remediator.store.records import RemediationRecord

REPAIRS = frozenset({"reboot", "reset_gpu"})
REPAIRABLE = frozenset({xid.Action.RESET_GPU, xid.Action.RESTART_BM, xid.Action.RESTART_VM})
FLAPPING = 3
FIRST_FAULT_LOOKBACK = timedelta(days=7)


@dataclass(frozen=True)
class Disagreement:
    remediation_id: int
    node: str
    policy: str
    at: datetime
    kind: str  # replace-then-repair, replace-on-first-fault, flapping, opt-out
    what: str


@dataclass(frozen=True)
class ShadowReport:
    since: datetime
    until: datetime
    remediations: int  # dry-run remediations opened in the window
    acted: int  # remediations in the window that were not dry runs (not reported on)
    by_policy: Mapping[str, int]
    by_pool: Mapping[str, int]
    by_policy_and_pool: Mapping[str, Mapping[str, int]]
    steps: Mapping[str, int]  # ladder step → how many remediations would have run it
    fenced_nodes: tuple[str, ...]
    # GPUs times the modelled time out of service (real step durations), of the fenced
    # remediations that said their GPUs and whose steps real remediations ran; None: fenced
    # remediations there were, but none could be modelled.
    gpu_hours: float | None
    gpu_hours_unknown: int  # fenced remediations whose node reported no GPU count
    holds: Mapping[str, int]  # cause (budget, breaker, pause) → decisions held
    breaker_trips: tuple[tuple[datetime, str], ...]
    disagreements: tuple[Disagreement, ...] = field(default_factory=tuple)
    would_have: Mapping[str, int] = field(default_factory=dict)  # its main action → count
    verdicts: tuple[Verdict, ...] = ()
    artefacts: tuple[Artefact, ...] = ()
    gpu_hours_unmodelled: int = 0  # fenced remediations with a step no real one ran
    unmodelled_steps: tuple[str, ...] = ()

    def gpu_hours_text(self) -> str:
        unknown = (
            f" (+{self.gpu_hours_unknown} without a GPU count)" if self.gpu_hours_unknown else ""
        )
        missing = ", ".join(self.unmodelled_steps)
        if self.gpu_hours is None:
            return (
                f"GPU-hours out of service: cannot model them: no real remediation ran {missing} "
                f"({self.gpu_hours_unmodelled} remediations){unknown}"
            )
        line = f"GPU-hours out of service (real step durations): {self.gpu_hours:.1f}{unknown}"
        if self.gpu_hours_unmodelled:
            line += (
                f"; {self.gpu_hours_unmodelled} remediations not modelled: no real remediation "
                f"ran {missing}"
            )
        return line

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "remediations": self.remediations,
            "acted": self.acted,
            "by_policy": dict(self.by_policy),
            "by_pool": dict(self.by_pool),
            "by_policy_and_pool": {p: dict(v) for p, v in self.by_policy_and_pool.items()},
            "steps": dict(self.steps),
            "fenced_nodes": list(self.fenced_nodes),
            "gpu_hours": None if self.gpu_hours is None else round(self.gpu_hours, 3),
            "gpu_hours_unknown": self.gpu_hours_unknown,
            "gpu_hours_unmodelled": self.gpu_hours_unmodelled,
            "unmodelled_steps": list(self.unmodelled_steps),
            "would_have": dict(self.would_have),
            "verdicts": [
                {
                    "remediation_id": v.remediation_id,
                    "node": v.node,
                    "policy": v.policy,
                    "at": v.at.isoformat(),
                    "action": v.action,
                    "steps": list(v.steps),
                    "fallback": v.fallback,
                    "why": v.why,
                }
                for v in self.verdicts
            ],
            "artefacts": [
                {
                    "remediation_id": a.remediation_id,
                    "node": a.node,
                    "policy": a.policy,
                    "at": a.at.isoformat(),
                    "what": a.what,
                }
                for a in self.artefacts
            ],
            "holds": dict(self.holds),
            "breaker_trips": [{"at": at.isoformat(), "reason": r} for at, r in self.breaker_trips],
            "disagreements": [
                {
                    "remediation_id": d.remediation_id,
                    "node": d.node,
                    "policy": d.policy,
                    "at": d.at.isoformat(),
                    "kind": d.kind,
                    "what": d.what,
                }
                for d in self.disagreements
            ],
        }

    def to_text(self) -> str:
        days = (self.until - self.since).total_seconds() / 86400
        lines = [
            f"Shadow report {self.since:%Y-%m-%d %H:%M} to {self.until:%Y-%m-%d %H:%M} UTC "
            f"({days:.1f} days)",
            f"{self.remediations} dry-run remediations"
            + (f" ({self.acted} others acted for real and are left out)" if self.acted else ""),
        ]
        for title, counts in (("by policy", self.by_policy), ("by pool", self.by_pool)):
            lines.append(f"  {title}: " + (", ".join(f"{k} {v}" for k, v in counts.items()) or "-"))
        lines.append("  steps: " + (", ".join(f"{k} {v}" for k, v in self.steps.items()) or "-"))
        lines.append(
            "  would have: " + (", ".join(f"{k} {v}" for k, v in self.would_have.items()) or "-")
        )
        for v in self.verdicts:
            if v.fallback:
                lines.append(f"    #{v.remediation_id} {v.node} {v.policy}: {v.why}")
        lines.append(
            f"would have fenced {len(self.fenced_nodes)} nodes: "
            + (", ".join(self.fenced_nodes) or "-")
        )
        lines.append(self.gpu_hours_text())
        lines.append("held: " + (", ".join(f"{k} {v}" for k, v in self.holds.items()) or "nothing"))
        lines.append(
            f"breaker trips: {len(self.breaker_trips)}"
            + "".join(f"\n  {at:%Y-%m-%d %H:%M} {reason}" for at, reason in self.breaker_trips)
        )
        lines.append(
            f"dry-run artefacts: {len(self.artefacts)} (not counted above: they exist only "
            "because the dry run did not act)"
        )
        for a in self.artefacts:
            lines.append(f"  #{a.remediation_id} {a.node} {a.policy}: {a.what}")
        lines.append(f"decisions to look at: {len(self.disagreements)}")
        for d in self.disagreements:
            lines.append(f"  #{d.remediation_id} {d.node} {d.policy} [{d.kind}]: {d.what}")
        return "\n".join(lines)


def _main(record: RemediationRecord) -> list[str]:
    """Its ladder's planned steps, without the fallbacks a failed repair would take."""
    return [str(step.get("action", "")) for step in record.ladder if not step.get("fallback")]


def _fenced_at(record: RemediationRecord) -> datetime | None:
    return next((e.at for e in record.events if e.to_state is State.QUARANTINED), None)


def _gpus(record: RemediationRecord) -> int | None:
    for event in record.events:
        if event.from_state is State.QUARANTINED or event.to_state is State.QUARANTINED:
            gpus = event.detail.get("gpus")
            if isinstance(gpus, int):
                return gpus
    return None


def _hold_cause(record: RemediationRecord) -> str | None:
    if record.queue_cause:
        return record.queue_cause
    for event in record.events:
        if event.to_state is State.QUEUED:
            text = str(event.detail.get("held") or record.hold_reason or "")
            if "breaker" in text:
                return "breaker"
            return "pause" if "pause" in text else "budget"
    return None


def build_report(
    records: Sequence[RemediationRecord],
    since: datetime,
    until: datetime,
    breaker_trips: Sequence[tuple[datetime, str]] = (),
) -> ShadowReport:
    """`records` with their events, any order; those opened in [since, until) are reported,
    earlier ones tell a node's first fault from a repeat, and every real (not dry-run) one
    gives the step durations GPU-hours are modelled from."""
    ordered = sorted(records, key=lambda r: (r.created_at, r.id))
    dry_run_only = artefacts(ordered)
    window = [r for r in ordered if since <= r.created_at < until]
    shadow = [r for r in window if r.dry_run and r.id not in dry_run_only]
    verdicts = {r.id: verdict(r, ordered, dry_run_only) for r in shadow}
    by_policy: Counter[str] = Counter(r.policy for r in shadow)
    by_pool: Counter[str] = Counter(r.pool or "(no pool)" for r in shadow)
    grid: dict[str, Counter[str]] = {}
    for r in shadow:
        grid.setdefault(r.policy, Counter())[r.pool or "(no pool)"] += 1
    steps: Counter[str] = Counter(s for v in verdicts.values() for s in dict.fromkeys(v.steps))
    would_have: Counter[str] = Counter(v.action for v in verdicts.values())
    durations = Durations(ordered)
    fenced: Counter[str] = Counter()
    hours, modelled, unknown, unmodelled = 0.0, 0, 0, 0
    missing: dict[str, None] = {}
    holds: Counter[str] = Counter()
    for r in shadow:
        cause = _hold_cause(r)
        if cause:
            holds[cause] += 1
        if _fenced_at(r) is None:
            continue
        fenced[r.node] += 1
        gpus = _gpus(r)
        if gpus is None:
            unknown += 1
            continue
        seconds, lacking = durations.seconds(verdicts[r.id].steps)
        if seconds is None:
            unmodelled += 1
            missing.update(dict.fromkeys(lacking))
            continue
        modelled += 1
        hours += gpus * seconds / 3600
    in_window = [a for a in dry_run_only.values() if since <= a.at < until]
    return ShadowReport(
        since=since,
        until=until,
        remediations=len(shadow),
        acted=sum(1 for r in window if not r.dry_run),
        by_policy=dict(by_policy.most_common()),
        by_pool=dict(by_pool.most_common()),
        by_policy_and_pool={p: dict(c.most_common()) for p, c in sorted(grid.items())},
        steps=dict(steps.most_common()),
        fenced_nodes=tuple(sorted(fenced)),
        gpu_hours=None if unmodelled and not modelled else hours,
        gpu_hours_unknown=unknown,
        holds=dict(holds.most_common()),
        breaker_trips=tuple(t for t in breaker_trips if since <= t[0] < until),
        disagreements=tuple(_disagreements(ordered, shadow, fenced, dry_run_only)),
        would_have=dict(would_have.most_common()),
        verdicts=tuple(verdicts[r.id] for r in shadow),
        artefacts=tuple(sorted(in_window, key=lambda a: (a.at, a.remediation_id))),
        gpu_hours_unmodelled=unmodelled,
        unmodelled_steps=tuple(missing),
    )


def _disagreements(
    ordered: Sequence[RemediationRecord],
    shadow: Sequence[RemediationRecord],
    fenced: Counter[str],
    skip: Mapping[int, Artefact],
) -> list[Disagreement]:
    """A replace is only flagged when the ladder plans it; a fallback replace comes after a
    repair was tried, and would have run only when that repair did not hold."""
    found: list[Disagreement] = []
    for r in shadow:
        steps = set(_main(r))
        if "replace" in steps:
            later = next(
                (
                    o
                    for o in ordered
                    if o.node == r.node
                    and o.created_at > r.created_at
                    and o.id not in skip
                    and REPAIRS & set(_main(o))
                ),
                None,
            )
            if later is not None:
                found.append(
                    Disagreement(
                        r.id,
                        r.node,
                        r.policy,
                        r.created_at,
                        "replace-then-repair",
                        f"would have replaced {r.node}; a later fault on it (#{later.id}, "
                        f"{later.policy}) went to {', '.join(sorted(REPAIRS & set(_main(later))))}"
                        ": a reboot may have been enough",
                    )
                )
            elif r.xid_code is not None and not steps & REPAIRS:
                info = xid.lookup(r.xid_code)
                earlier = any(
                    o.node == r.node
                    and o.id not in skip
                    and r.created_at - FIRST_FAULT_LOOKBACK <= o.created_at < r.created_at
                    for o in ordered
                )
                if info is not None and info.immediate in REPAIRABLE and not earlier:
                    found.append(
                        Disagreement(
                            r.id,
                            r.node,
                            r.policy,
                            r.created_at,
                            "replace-on-first-fault",
                            f"would have replaced {r.node} on its first XID {r.xid_code} in a "
                            f"week; NVIDIA's catalog says {info.immediate.value} first",
                        )
                    )
        held = next((e for e in r.events if e.detail.get("dry_run_would_hold")), None)
        if held is not None:
            found.append(
                Disagreement(
                    r.id,
                    r.node,
                    r.policy,
                    held.at,
                    "opt-out",
                    f"would have been held: {held.detail['dry_run_would_hold']}",
                )
            )
    flagged: set[str] = set()
    for r in shadow:
        if fenced[r.node] >= FLAPPING and r.node not in flagged:
            flagged.add(r.node)
            found.append(
                Disagreement(
                    r.id,
                    r.node,
                    r.policy,
                    r.created_at,
                    "flapping",
                    f"would have fenced {r.node} {fenced[r.node]} times: the signal or its "
                    "threshold may flap",
                )
            )
    return sorted(found, key=lambda d: (d.at, d.remediation_id))
