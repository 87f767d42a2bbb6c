"""Planned work: the moment a planned ladder (a policy with `when:`) acts, and its own budget.

Pure: signals give the deadline, the pool's windows give their openings, the job's handshake
pods give their next checkpoints, the caller gives `now`. The moment is the job's next checkpoint
inside an opening of the window, never later than the deadline less the margin and the drain's
expected time; a deadline already passed is urgent (the ordinary ladder, at once)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from remediator.policy.durations import format_duration, parse_duration
from remediator.policy.schema import Checkpoint, Drain, PlannedBudget, Policy, When
from remediator.policy.windows import Opening

# A handshake pod may announce when it next saves its state (RFC 3339) and how often it does:
# the planner drains the node right after that checkpoint, so the job loses nothing.
ANN_NEXT_CHECKPOINT = "remediator.io/next-checkpoint"
ANN_CHECKPOINT_INTERVAL = "remediator.io/checkpoint-interval"
# Checkpoints announced further out than this are not looked for (a typo'd interval of 1s).
MAX_CHECKPOINTS = 1000


@dataclass(frozen=True, slots=True)
class Moment:
    """When to start the drain and why. `urgent`: the deadline has passed, act now outside any
    window. `latest`: the last start that still finishes before the deadline and its margin
    (None with no deadline: a pending row remap waits for a window however long it takes)."""

    at: datetime
    reason: str
    latest: datetime | None
    deadline: datetime | None
    urgent: bool = False
    checkpoint: datetime | None = None
    opening: Opening | None = None


# With no deadline, windows and checkpoints are looked for this far ahead.
NO_DEADLINE_HORIZON = timedelta(days=14)


def drain_time(policy: Policy) -> timedelta:
    """How long the drain is expected to take: `when.drain_time`, else the grace the ladder gives
    its pods (the checkpoint step's max_grace, or the drain's grace)."""
    if policy.when is not None and policy.when.drain_time is not None:
        return policy.when.drain_time
    for step in policy.actions:
        if isinstance(step, Checkpoint):
            return step.max_grace
        if isinstance(step, Drain):
            return step.grace
    return timedelta(0)


def choose_moment(
    *,
    now: datetime,
    deadline: datetime | None,
    when: When,
    drain: timedelta,
    openings: Sequence[Opening] | None,
    checkpoints: Sequence[datetime] = (),
    came: datetime | None = None,
) -> Moment:
    """The earliest good moment. `openings` None: no window applies (the policy names none);
    an empty list: the window never opens before the deadline, so the latest safe moment is
    taken (the cloud would act anyway; better drained than not). With no deadline and no
    opening at all, now: there is nothing to wait for.

    `came`: a waiting plan's chosen moment, once it is past. It stands while a drain may still
    start now (inside a window, before the latest start): a job that announces its checkpoints
    every interval always has a next one, and choosing afresh would roll the plan forward for
    ever. The ladder's checkpoint step has the pods save once more anyway."""
    latest = None if deadline is None else deadline - when.before_deadline - drain
    if deadline is not None and now >= deadline:
        return Moment(now, "the deadline has passed", latest, deadline, urgent=True)
    if latest is not None and latest <= now:
        return Moment(came or now, "past the latest safe moment: now", latest, deadline)
    spans = _spans(now, latest or now + NO_DEADLINE_HORIZON, drain, openings)
    if came is not None and came <= now and spans and spans[0][0] <= now:
        opening = spans[0][2]
        where = f" inside window {opening.window}" if opening is not None else ""
        return Moment(
            came, f"the planned moment has come{where}", latest, deadline, opening=opening
        )
    if when.at_checkpoint:
        for checkpoint in checkpoints:
            for start, end, opening in spans:
                if start <= checkpoint <= end:
                    where = f" inside window {opening.window}" if opening is not None else ""
                    reason = f"the job's checkpoint{where}"
                    return Moment(checkpoint, reason, latest, deadline, False, checkpoint, opening)
    if spans:
        start, _, opening = spans[0]
        if opening is None:
            reason = "now" if not when.at_checkpoint else "no checkpoint announced in time: now"
        else:
            reason = f"window {opening.window} opens" if start > now else f"window {opening.window}"
            if when.at_checkpoint:
                reason = f"no checkpoint inside a window in time: {reason}"
        return Moment(start, reason, latest, deadline, opening=opening)
    if latest is None:
        return Moment(now, "no window opens for this pool: now", latest, deadline)
    return Moment(latest, "no window opens in time: the latest safe moment", latest, deadline)


def _spans(
    now: datetime, latest: datetime, drain: timedelta, openings: Sequence[Opening] | None
) -> list[tuple[datetime, datetime, Opening | None]]:
    """Where a drain may start: within [now, latest] and, with windows, early enough in an
    opening that the drain ends inside it."""
    if openings is None:
        return [(now, latest, None)]
    spans: list[tuple[datetime, datetime, Opening | None]] = []
    for opening in sorted(openings, key=lambda o: o.start):
        start, end = max(now, opening.start), min(latest, opening.end - drain)
        if start <= end:
            spans.append((start, end, opening))
    return spans


def announced_checkpoints(
    pods: Iterable[Mapping[str, str]], now: datetime, until: datetime
) -> tuple[list[datetime], list[str]]:
    """The moments by which every announcing pod has checkpointed (the k-th moment is the
    latest of each pod's k-th checkpoint from now), up to `until`; and one problem per pod
    whose annotations cannot be read (such a pod is left out, never guessed)."""
    series: list[list[datetime]] = []
    problems: list[str] = []
    for pod in pods:
        raw = pod.get(ANN_NEXT_CHECKPOINT)
        if raw is None:
            continue
        try:
            first = datetime.fromisoformat(raw.replace("Z", "+00:00"))
            if first.tzinfo is None:
                raise ValueError("no time zone")
            interval_raw = pod.get(ANN_CHECKPOINT_INTERVAL)
            interval = parse_duration(interval_raw) if interval_raw else None
        except ValueError as exc:
            problems.append(f"{raw!r}: {exc}")
            continue
        times: list[datetime] = []
        moment = first
        if interval is not None and interval > timedelta(0) and moment < now:
            moment += interval * -(-(now - moment) // interval)
        while moment <= until and len(times) < MAX_CHECKPOINTS:
            if moment >= now:
                times.append(moment)
            if interval is None or interval <= timedelta(0):
                break
            moment += interval
        series.append(times)
    if not series:
        return [], problems
    depth = min(len(times) for times in series)
    return [max(times[k] for times in series) for k in range(depth)], problems


class Placed(Protocol):
    """What the planned budget reads of a decision or a queued plan."""

    @property
    def node(self) -> str: ...
    @property
    def pool(self) -> str | None: ...


P = TypeVar("P", bound=Placed)


def admit_planned(
    candidates: Sequence[P], budget: PlannedBudget, running: Mapping[str, int]
) -> tuple[list[P], list[tuple[P, str]]]:
    """Planned remediations whose moment has come, within their own budget (`running`: planned
    remediations past their moment, per pool). They never reach the storm breaker: announced
    maintenance is not a sign that the signals are wrong."""
    per_pool = dict(running)
    total = sum(per_pool.values())
    admitted: list[P] = []
    held: list[tuple[P, str]] = []
    for candidate in sorted(candidates, key=lambda c: c.node):
        pool = candidate.pool or ""
        if total + 1 > budget.max_concurrent:
            held.append((candidate, f"planned max_concurrent ({budget.max_concurrent})"))
            continue
        if per_pool.get(pool, 0) + 1 > budget.per_pool:
            held.append((candidate, f"planned per_pool in {pool or '(none)'} ({budget.per_pool})"))
            continue
        per_pool[pool] = per_pool.get(pool, 0) + 1
        total += 1
        admitted.append(candidate)
    return admitted, held


def describe(moment: Moment) -> str:
    """One line for the timeline and the console."""
    head = "urgent" if moment.urgent else f"at {moment.at.isoformat()}"
    if moment.deadline is None:
        return f"{head} ({moment.reason}); no deadline"
    if moment.urgent:
        ago = format_duration(max(timedelta(0), moment.at - moment.deadline))
        return (
            f"urgent ({moment.reason}); deadline {moment.deadline.isoformat()}, {ago} ago: "
            "the ordinary ladder at once, through the ordinary budgets, no window or checkpoint "
            "waited for"
        )
    left = format_duration(max(timedelta(0), moment.deadline - moment.at))
    return f"{head} ({moment.reason}); deadline {moment.deadline.isoformat()}, {left} before it"
