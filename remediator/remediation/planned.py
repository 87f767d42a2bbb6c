"""Planned remediations at intake: a decision of a policy with `when:` waits, durably, for the
moment policy/planned.py chooses, then is admitted under the planned budget; never through the
storm breaker or `max_concurrent` (announced maintenance is not a storm).

The wait is a remediation in state `queued` with cause `planned`: it survives a restart, shows in
the console with its hold reason, and `next_attempt_at` holds the chosen moment. Every choice
(and every change of it, as checkpoints are announced or windows edited) is a `planned` line on
the timeline with the deadline, the moment and why. The moment is recomputed each cycle from
durable inputs only (the stored signals, the policy set, the pods' announcements), so a crash
loses nothing. A decision whose deadline has passed takes the ordinary (urgent) path.

The deadline to beat is when the cloud itself acts: the event's window start (EC2 `notBefore`,
GCE `windowStartTime`), else its own deadline (EC2 `notBeforeDeadline`, GCE
`latestWindowStartTime`); a pending row remap has none and waits for a window however long. A
rescheduled event's newer signal is linked to the waiting remediation, so the newest version of
each event decides; an event the cloud completed or cancelled closes the wait."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from remediator.errors import RemediatorError
from remediator.kube.client import KubeClient
from remediator.model.states import State
from remediator.policy.loader import PolicySet
from remediator.policy.planned import (
    NO_DEADLINE_HORIZON,
    Moment,
    announced_checkpoints,
    choose_moment,
    describe,
    drain_time,
)
from remediator.policy.schema import Policy
from remediator.policy.windows import POOL_WINDOW, openings, pool_windows
from remediator.signals.maintenance import MaintenanceEvent
from remediator.signals.model import Signal, SignalKind
from remediator.store.records import RemediationRecord

log = logging.getLogger(__name__)

PLANNED_ACTION = "planned"
# node → the annotations of each pod on it (those that announce checkpoints matter).
PodAnnotations = Callable[[str], Sequence[Mapping[str, str]]]


def no_pods(_: str) -> Sequence[Mapping[str, str]]:
    return ()


def pods_from(kube: KubeClient) -> PodAnnotations:
    """The pods' annotations through the API; a failed read announces no checkpoint (the plan
    falls back to the window, and is chosen again next cycle)."""

    def read(node: str) -> Sequence[Mapping[str, str]]:
        try:
            return [pod.annotations for pod in kube.list_pods_on_node(node)]
        except RemediatorError as exc:
            log.warning("planned: cannot read the pods on %s: %s", node, exc)
            return ()

    return read


def events_of(signals: Iterable[Signal]) -> dict[str, MaintenanceEvent]:
    """The newest version of each maintenance event among the signals, by event id."""
    newest: dict[str, tuple[datetime, MaintenanceEvent]] = {}
    for signal in signals:
        if signal.kind is not SignalKind.MAINTENANCE:
            continue
        try:
            event = MaintenanceEvent.of(signal)
        except ValueError:
            continue
        seen = newest.get(event.event_id)
        if seen is None or signal.observed_at >= seen[0]:
            newest[event.event_id] = (signal.observed_at, event)
    return {key: event for key, (_, event) in newest.items()}


def event_deadline(event: MaintenanceEvent) -> datetime | None:
    """When the cloud acts on its own: the window's start, else the event's deadline."""
    return event.window_start or event.deadline


def maintenance_event(record: RemediationRecord) -> str:
    """The announced event's code a `reboot via: maintenance` starts (its newest open one)."""
    events = [e for e in events_of(record.signals).values() if not e.ended]
    return events[0].code if events else ""


@dataclass(frozen=True, slots=True)
class Plan:
    """`moment` None: nothing to plan (not a planned policy, or no maintenance event);
    `ended`: every event the decision is about has been completed or cancelled."""

    moment: Moment | None
    ended: bool = False


def plan_moment(
    policy: Policy,
    pool: str | None,
    signals: Sequence[Signal],
    policies: PolicySet,
    now: datetime,
    pods: Callable[[], Sequence[Mapping[str, str]]] = tuple,
    came: datetime | None = None,
) -> Plan:
    """The moment for a planned policy's decision (see the module docstring); `came`: a
    waiting plan's stored moment, which stands once it is past (policy/planned.choose_moment)."""
    when = policy.when
    events = events_of(signals)
    if when is None or not events:
        return Plan(None)
    live = [e for e in events.values() if not e.ended]
    if not live:
        return Plan(None, ended=True)
    deadlines = [d for d in (event_deadline(e) for e in live) if d is not None]
    deadline = min(deadlines) if deadlines else None
    horizon = max(now, deadline) if deadline is not None else now + NO_DEADLINE_HORIZON
    windows = policies.settings.windows
    names: list[str] | None = None
    if when.window == POOL_WINDOW:
        # A pool with no window of its own puts no bound on when: only the deadline does.
        names = pool_windows(windows, pool) or None
    elif when.window is not None:
        names = [when.window] if when.window in windows else []
    found = None if names is None else openings(windows, names, now, horizon)
    checkpoints: list[datetime] = []
    if when.at_checkpoint:
        checkpoints, _ = announced_checkpoints(pods(), now, horizon)
    moment = choose_moment(
        now=now,
        deadline=deadline,
        when=when,
        drain=drain_time(policy),
        openings=found,
        checkpoints=checkpoints,
        came=came,
    )
    return Plan(moment)


def planned_detail(moment: Moment) -> dict[str, Any]:
    """The timeline's `planned` line: everything the console shows of the plan."""
    detail: dict[str, Any] = {
        "deadline": moment.deadline.isoformat() if moment.deadline else None,
        "moment": moment.at.isoformat(),
        "latest": moment.latest.isoformat() if moment.latest else None,
        "reason": moment.reason,
        "urgent": moment.urgent,
        "text": describe(moment),
    }
    if moment.checkpoint is not None:
        detail["checkpoint"] = moment.checkpoint.isoformat()
    if moment.opening is not None:
        detail["window"] = moment.opening.window
        detail["window_start"] = moment.opening.start.isoformat()
        detail["window_end"] = moment.opening.end.isoformat()
    return detail


def hold_text(moment: Moment) -> str:
    return f"planned: {describe(moment)}"


def planned_running(fencing: Sequence[RemediationRecord], policies: PolicySet) -> dict[str, int]:
    """Planned remediations past their moment (in work), per pool: the planned budget's use."""
    per_pool: dict[str, int] = {}
    for record in fencing:
        policy = policies.policy(record.policy)
        if policy is None or policy.when is None or record.state is State.QUEUED:
            continue
        if record.dry_run:
            continue
        pool = record.pool or ""
        per_pool[pool] = per_pool.get(pool, 0) + 1
    return per_pool


def moment_came(record: RemediationRecord | None, now: datetime) -> datetime | None:
    """A waiting plan's stored moment (`next_attempt_at`) once it is past; else None."""
    if record is None or record.next_attempt_at is None or record.next_attempt_at > now:
        return None
    return record.next_attempt_at


def due(moment: Moment, now: datetime) -> bool:
    return moment.urgent or moment.at <= now


def same_moment(record: RemediationRecord, moment: Moment) -> bool:
    """Whether the stored plan (its moment, in `next_attempt_at`) still holds."""
    stored = record.next_attempt_at
    return stored is not None and abs(stored - moment.at) < timedelta(seconds=1)
