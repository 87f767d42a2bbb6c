"""The quarantined-machine rule (issue #28), as a pure function over the ledger's history: a
machine that failed validation or was replaced `count` times within `within` is held, never
returned to a pool. Not to be confused with the fence step (actions/quarantine.py: cordon +
taint of a node for one remediation): this hold is of the hardware, whatever node name it has,
and lasts until an operator lifts it.

Each remediation counts once per machine: a replacement that failed its validation and was
replaced again is one bad machine in one incident, not two."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from remediator.ledger.identity import DMI_RANK, rank

StrikeKind = Literal["replaced", "validation_failed"]
REPLACED: StrikeKind = "replaced"
VALIDATION_FAILED: StrikeKind = "validation_failed"


@dataclass(frozen=True, slots=True)
class Strike:
    """One time the machine was taken out: replaced, or failed its validation."""

    kind: StrikeKind
    at: datetime
    node: str
    remediation_id: int | None


@dataclass(frozen=True, slots=True)
class HoldDecision:
    machine: str
    reason: str
    remediation_id: int | None  # the remediation whose strike reached the count
    strikes: tuple[Strike, ...]


def hold_due(
    machine: str,
    strikes: Sequence[Strike],
    *,
    count: int,
    within: timedelta,
    now: datetime,
    lifted_at: datetime | None = None,
) -> HoldDecision | None:
    """The hold when the machine's strikes in (now - within, now] reach `count`; a strike before
    the last lift counts no more (an operator returned the machine knowing its past)."""
    if count <= 0:
        return None
    since = now - within
    if lifted_at is not None:
        since = max(since, lifted_at)
    seen: set[int] = set()
    counted: list[Strike] = []
    for strike in sorted(strikes, key=lambda s: s.at):
        if not since < strike.at <= now:
            continue
        if strike.remediation_id is not None:
            if strike.remediation_id in seen:
                continue
            seen.add(strike.remediation_id)
        counted.append(strike)
    if len(counted) < count:
        return None
    last = counted[-1]
    words = {REPLACED: "replaced", VALIDATION_FAILED: "failed validation"}
    told = ", ".join(
        f"{words[s.kind]} on {s.node}"
        + (f" (#{s.remediation_id})" if s.remediation_id is not None else "")
        for s in counted
    )
    days = within.total_seconds() / 86400
    reason = (
        f"taken out {len(counted)} times within {days:g} days (machine_hold.count {count}): {told}"
    )
    return HoldDecision(machine, reason, last.remediation_id, tuple(counted))


@dataclass(frozen=True, slots=True)
class NodeSeen:
    """A node of the cluster as the arrival check needs it: the machine behind it (None when
    nothing names one) and whether it is cordoned and carries the quarantine taint."""

    name: str
    machine: str | None
    cordoned: bool
    tainted: bool


@dataclass(frozen=True, slots=True)
class ArrivalFence:
    """Fence `node`: it runs on `machine`, which is quarantined for `reason`."""

    node: str
    machine: str
    reason: str
    cordon: bool
    taint: bool


def arrival_machine(latest: str | None, behind: str | None) -> str | None:
    """The machine behind a node for the arrival check: the DMI serial the database last saw
    under the name (whichever replica took the heartbeat that named it) outranks this replica's
    view `behind` (its picture, else the Node's providerID) unless that is a cloud's instance id
    (identity.rank); a providerID-named machine in the database does not (a recreated
    instance's Node is fresher)."""
    return latest if rank(latest) == DMI_RANK and rank(behind) <= DMI_RANK else behind


def fences_due(
    nodes: Iterable[NodeSeen],
    quarantined: Mapping[str, str],
    fenced: Collection[tuple[str, str]],
) -> list[ArrivalFence]:
    """The nodes on a quarantined machine (machine id → its reason) not fenced yet: a host put
    back by hand under a new name must not take work. Once per (machine, node) since the
    quarantine (`fenced`): a human who then uncordons it on purpose is not fought; the lift is
    the way back. A node already cordoned and tainted (a remediation's fence) needs nothing."""
    due: list[ArrivalFence] = []
    for node in nodes:
        if node.machine is None or (reason := quarantined.get(node.machine)) is None:
            continue
        if (node.machine, node.name) in fenced or (node.cordoned and node.tainted):
            continue
        due.append(
            ArrivalFence(node.name, node.machine, reason, not node.cordoned, not node.tainted)
        )
    return due
