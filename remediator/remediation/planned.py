"""Planned remediations at intake: a decision of a policy with `when:` waits, durably, for the
moment policy/planned.py chooses, then is admitted under the planned budget; never through the
storm breaker or `max_concurrent` (announced maintenance is not a storm).

The wait is a remediation in state `queued` with cause `planned`: it survives a restart, shows in
the console with its hold reason, and `next_attempt_at` holds the chosen moment. Every choice
(and every change of it, as checkpoints are announced or windows edited) is a `planned` line on
the timeline with the deadline, the moment and why. The moment is recomputed each cycle from
durable inputs only (the stored signals, the policy set, the pods' announcements), so a crash
loses nothing. A decision whose deadline has passed, or that carries no deadline at all, is not
planned: it takes the ordinary (urgent) path."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from remediator.errors import RemediatorError
from remediator.kube.client import KubeClient
from remediator.model.states import State
from remediator.policy.loader import PolicySet
from remediator.policy.planned import (
    Moment,
    announced_checkpoints,
    choose_moment,
    describe,
    drain_time,
)
from remediator.policy.schema import Policy
from remediator.policy.windows import POOL_WINDOW, openings, pool_windows
from remediator.signals.model import Signal
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


def signal_deadline(signal: Signal) -> datetime | None:
    """When the announced disruption happens: the signal's `deadline` label (RFC 3339)."""
    raw = signal.labels.get("deadline")
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def maintenance_event(record: RemediationRecord) -> str:
    """The announced event's code a `reboot via: maintenance` starts (its signal's `event`)."""
    for signal in record.signals:
        event = signal.labels.get("event")
        if event:
            return event
    return ""


def deadline_of(signals: Iterable[Signal]) -> datetime | None:
    """The earliest deadline among the signals: the first disruption is the one to beat."""
    found = [d for d in (signal_deadline(s) for s in signals) if d is not None]
    return min(found) if found else None


def plan_moment(
    policy: Policy,
    pool: str | None,
    signals: Sequence[Signal],
    policies: PolicySet,
    now: datetime,
    pods: Callable[[], Sequence[Mapping[str, str]]] = tuple,
) -> Moment | None:
    """The moment for a planned policy's decision; None when it is not planned (no `when:`,
    or no deadline in its signals)."""
    when = policy.when
    deadline = deadline_of(signals)
    if when is None or deadline is None:
        return None
    drain = drain_time(policy)
    windows = policies.settings.windows
    names: list[str] | None = None
    if when.window == POOL_WINDOW:
        names = pool_windows(windows, pool)
    elif when.window is not None:
        names = [when.window] if when.window in windows else []
    found = None if names is None else openings(windows, names, now, max(now, deadline))
    checkpoints: list[datetime] = []
    if when.at_checkpoint:
        checkpoints, _ = announced_checkpoints(pods(), now, max(now, deadline))
    return choose_moment(
        now=now, deadline=deadline, when=when, drain=drain, openings=found, checkpoints=checkpoints
    )


def planned_detail(moment: Moment) -> dict[str, Any]:
    """The timeline's `planned` line: everything the console shows of the plan."""
    detail: dict[str, Any] = {
        "deadline": moment.deadline.isoformat(),
        "moment": moment.at.isoformat(),
        "latest": moment.latest.isoformat(),
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


def due(moment: Moment, now: datetime) -> bool:
    return moment.urgent or moment.at <= now


def same_moment(record: RemediationRecord, moment: Moment) -> bool:
    """Whether the stored plan (its moment, in `next_attempt_at`) still holds."""
    stored = record.next_attempt_at
    return stored is not None and abs(stored - moment.at) < timedelta(seconds=1)
