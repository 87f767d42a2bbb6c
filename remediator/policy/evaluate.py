"""Signals + history + policies + now → decisions. Pure: no I/O and no clock of its own; the
streak and burst state it needs across cycles comes in with the history and goes out with the
result, so the controller can persist it or hand it back next cycle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Literal

from remediator.policy.durations import format_duration
from remediator.policy.fallbacks import Fallback, fallback_chain
from remediator.policy.quorum import short_of_quorum
from remediator.policy.repeats import Counted, counted
from remediator.policy.schema import GlobalSettings, Policy, Step, Threshold
from remediator.signals.dedup import COUNTER_KINDS
from remediator.signals.model import Signal, SignalKind

StreakKey = tuple[str, str, int | None]  # (policy, node, gpu)
EventKey = tuple[str, str]  # (policy, node)
BurstEvent = tuple[datetime, int | None, int | None]  # (observed at, gpu, code)


@dataclass(frozen=True, slots=True)
class PastRemediation:
    node: str
    policy: str
    started_at: datetime
    outcome: str
    kind: str | None = None  # the kind of the signal that started it (a repeat may count kinds)
    gpus: frozenset[str] = frozenset()  # UUIDs of the GPUs its signals named
    machine: str | None = None  # the machine it concerned, when the ledger knew it


@dataclass(frozen=True, slots=True)
class Streak:
    """A threshold breach running since `since`: `breached` is its last reading at or beyond the
    trigger, `last` its last reading of any kind (a band reading keeps it alive, see `advance`)."""

    since: datetime
    breached: datetime
    last: datetime

    @property
    def held(self) -> timedelta:
        """How long the breach has held, as far as readings at or beyond the trigger show."""
        return self.breached - self.since


@dataclass(frozen=True)
class EvalState:
    streaks: Mapping[StreakKey, Streak] = field(default_factory=dict)
    events: Mapping[EventKey, tuple[BurstEvent, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class History:
    """What the controller knows from its database; evaluate never changes it."""

    open: Mapping[str, str] = field(default_factory=dict)  # node → policy of its open remediation
    past: Mapping[str, tuple[PastRemediation, ...]] = field(default_factory=dict)  # by node
    machines: Mapping[str, str] = field(default_factory=dict)  # node → machine behind it now
    pools: Mapping[str, str] = field(default_factory=dict)  # node → pool
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node → labels
    state: EvalState = field(default_factory=EvalState)

    @classmethod
    def build(
        cls,
        *,
        remediations: Iterable[PastRemediation] = (),
        open: Mapping[str, str] | None = None,
        pools: Mapping[str, str] | None = None,
        labels: Mapping[str, Mapping[str, str]] | None = None,
        state: EvalState | None = None,
        machines: Mapping[str, str] | None = None,
    ) -> History:
        by_node: dict[str, list[PastRemediation]] = {}
        for item in remediations:
            by_node.setdefault(item.node, []).append(item)
        return cls(
            open=dict(open or {}),
            past={node: tuple(items) for node, items in by_node.items()},
            pools=dict(pools or {}),
            labels=dict(labels or {}),
            state=state or EvalState(),
            machines=dict(machines or {}),
        )

    def repeats_of(
        self, node: str, by: str, signals: Sequence[Signal]
    ) -> tuple[tuple[PastRemediation, ...], str]:
        """The past remediations a `repeat` counts and what they share. Signals that name no
        GPU are counted by the machine, and without a known machine by the node name: what is
        known is never less than the name (the behaviour before the ledger)."""
        everything = [r for items in self.past.values() for r in items]
        if by == "gpu":
            uuids = frozenset(s.gpu_uuid for s in signals if s.gpu_uuid is not None)
            if uuids:
                subject = "GPU " + ", ".join(sorted(uuids))
                return tuple(r for r in everything if r.gpus & uuids), subject
        machine = self.machines.get(node)
        if by != "node" and machine is not None:
            return tuple(r for r in everything if r.machine == machine), f"machine {machine}"
        return self.past.get(node, ()), "this node"


@dataclass(frozen=True, slots=True)
class Decision:
    node: str
    pool: str | None
    policy: str
    priority: int
    signals: tuple[Signal, ...]
    actions: tuple[Step, ...]
    approval: Literal["auto", "required"]
    dry_run: bool
    disruptive: bool
    reason: str
    decided_at: datetime
    on_failure: str | None = None
    # The ladders a failed repair goes on to, resolved now: the remediation stores them.
    fallbacks: tuple[Fallback, ...] = ()
    # What the ladder acts on (policy/scope.py): `node` alone, or, once folded, every node of
    # `domain` (its clique or its whole NVLink domain) in `members`.
    scope: Literal["node", "clique", "domain"] = "node"
    domain: str | None = None
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evaluation:
    decisions: tuple[Decision, ...]
    state: EvalState


@dataclass(slots=True)
class _Hit:
    """The signals that matched this cycle; `lead` is the one with the longest streak (or the
    latest), the one the reason names."""

    signals: list[Signal]
    lead: Signal
    streak: Streak | None = None


def evaluate(
    signals: Iterable[Signal],
    history: History,
    policies: Sequence[Policy],
    now: datetime,
    settings: GlobalSettings,
) -> Evaluation:
    """Decide at most one remediation per node: the highest priority policy whose match holds,
    skipping nodes already under remediation and node+policy pairs still in cooldown.

    A decision needs a matching signal in this cycle; signals are taken in time order so that
    streaks advance the way the readings happened."""
    by_name = {p.name: p for p in policies}
    by_kind: dict[SignalKind, list[Policy]] = {}
    for policy in sorted(policies, key=attrgetter("name")):
        by_kind.setdefault(policy.match.kind, []).append(policy)
    codes = {p.name: frozenset(p.match.codes) for p in policies if p.match.codes is not None}

    streaks = _live_streaks(history.state.streaks, by_name, now)
    events = _live_events(history.state.events, by_name, now)
    selected: dict[EventKey, bool] = {}
    hits: dict[EventKey, _Hit] = {}

    for signal in sorted(signals, key=attrgetter("observed_at")):
        candidates = by_kind.get(signal.kind)
        if candidates is None:
            continue
        node = signal.node
        for policy in candidates:
            name = policy.name
            match = policy.match
            if name in codes and signal.code not in codes[name]:
                continue
            if match.labels and not _subset(match.labels, signal.labels):
                continue
            key = (name, node)
            chosen = selected.get(key)
            if chosen is None:
                chosen = selected[key] = _selects(policy, node, history)
            if not chosen:
                continue
            threshold = match.threshold
            streak: Streak | None = None
            if threshold is not None:
                skey = (name, node, signal.gpu)
                at = signal.observed_at
                previous = streaks.get(skey)
                if previous is not None and at - previous.last > threshold.gap:
                    previous = None
                breach = _breach(threshold, signal)
                streak = advance(previous, signal, breach, threshold)
                if streak is None:
                    streaks.pop(skey, None)
                    continue
                streaks[skey] = streak
                if match.burst is not None and breach:
                    _count(events, key, signal)
                # Only a reading at or beyond the trigger completes a streak: a band reading
                # keeps it running but cannot say the breach still holds.
                if not breach or streak.held < threshold.for_:
                    continue
            elif match.burst is not None:
                _count(events, key, signal)
            hit = hits.get(key)
            if hit is None:
                hit = hits[key] = _Hit([], signal, streak)
            hit.signals.append(signal)
            if streak is None or hit.streak is None or streak.since <= hit.streak.since:
                hit.lead, hit.streak = signal, streak

    for key in short_of_quorum(hits, by_name, history.labels):
        del hits[key]
    per_node: dict[str, list[Decision]] = {}
    for (name, node), hit in hits.items():
        policy = by_name[name]
        decision = _decide(
            policy,
            node,
            hit,
            events.get((name, node), ()),
            history,
            now,
            settings,
            counted(policy, by_name),
        )
        if decision is not None:
            chain = fallback_chain(by_name[name], by_name)
            per_node.setdefault(node, []).append(replace(decision, fallbacks=chain))
    winners = [min(found, key=lambda d: (-d.priority, d.policy)) for found in per_node.values()]
    winners.sort(key=lambda d: (-d.priority, d.node))
    return Evaluation(tuple(winners), EvalState(streaks, events))


def _breach(threshold: Threshold, signal: Signal) -> bool:
    """At or beyond the trigger. A firing alert without a value (`since` set, no `value`) is
    its rule's own word that the condition holds: a breach at the trigger level."""
    if signal.value is None and signal.since is not None:
        return True
    return threshold.breached(signal.value)


def advance(
    previous: Streak | None, signal: Signal, breach: bool, threshold: Threshold
) -> Streak | None:
    """Hysteresis: a streak starts only on a breach; a reading in the band between the trigger
    and `clear` keeps a running streak alive (`last`) without extending what it proves
    (`breached`); at or beyond `clear` it ends. A state signal (a firing alert) reports when
    its breach began, so the streak runs from there rather than from its first notification."""
    at = signal.observed_at
    if breach:
        since = at if previous is None else previous.since
        if signal.since is not None and signal.since < since:
            since = signal.since
        return Streak(since, at, at)
    if previous is None or threshold.cleared(signal.value):
        return None
    return Streak(previous.since, previous.breached, at)


def _count(events: dict[EventKey, tuple[BurstEvent, ...]], key: EventKey, signal: Signal) -> None:
    """One more burst event, unless the signal re-announces a lasting state (the DCGM XID gauge
    holds its code) already counted in the window: only counter kinds report new errors each
    time they pass the fold."""
    past = events.get(key, ())
    if signal.kind not in COUNTER_KINDS and any(
        (gpu, code) == (signal.gpu, signal.code) for _, gpu, code in past
    ):
        return
    events[key] = (*past, (signal.observed_at, signal.gpu, signal.code))


def _decide(
    policy: Policy,
    node: str,
    hit: _Hit,
    node_events: tuple[BurstEvent, ...],
    history: History,
    now: datetime,
    settings: GlobalSettings,
    repeats: Counted | None,
) -> Decision | None:
    if node in history.open:
        return None
    match = policy.match
    past = history.past.get(node, ())
    cooldown = policy.cooldown if policy.cooldown is not None else settings.default_cooldown
    if any(r.policy == policy.name and r.started_at > now - cooldown for r in past):
        return None
    # An event delivered late (an agent's queue after an outage) from before this policy's last
    # remediation of the node was covered by it: the node was repaired after it happened.
    covered = max((r.started_at for r in past if r.policy == policy.name), default=None)
    if covered is not None and all(s.observed_at < covered for s in hit.signals):
        return None
    reasons = [_signal_reason(policy, hit)]
    if match.burst is not None:
        found = densest(node_events, match.burst.within)
        if found < match.burst.count:
            return None
        reasons.append(f"{found} events within {format_duration(match.burst.within)}")
    if match.repeat is not None and repeats is not None:
        counted_past, subject = history.repeats_of(node, match.repeat.by, hit.signals)
        recent = sum(
            1
            for r in counted_past
            if r.started_at > now - match.repeat.within and repeats.counts(r.policy, r.kind)
        )
        if recent + 1 < match.repeat.count:
            return None
        reasons.append(
            f"remediation #{recent + 1} of {subject} within "
            f"{format_duration(match.repeat.within)} counting {repeats.describe()}"
        )
    return Decision(
        node=node,
        pool=history.pools.get(node),
        policy=policy.name,
        priority=policy.priority,
        signals=tuple(hit.signals),
        actions=tuple(policy.actions),
        approval=policy.approval,
        dry_run=policy.dry_run or settings.dry_run,
        disruptive=policy.disruptive,
        reason=f"{policy.name}: " + "; ".join(reasons),
        decided_at=now,
        on_failure=policy.on_failure,
        scope=policy.scope,
    )


def densest(events: Sequence[BurstEvent], within: timedelta) -> int:
    """The most events inside any `within` window, by the events' own times: a queue delivered
    after an outage brings events hours apart in one cycle, and they are not a burst."""
    times = sorted(e[0] for e in events)
    best, first = 0, 0
    for last, when in enumerate(times):
        while times[first] <= when - within:
            first += 1
        best = max(best, last - first + 1)
    return best


def _signal_reason(policy: Policy, hit: _Hit) -> str:
    lead = hit.lead
    what = lead.kind.value if lead.code is None else f"{lead.kind.value} {lead.code}"
    if lead.value is not None:
        what += f" value {lead.value:g}"
    if lead.gpu is not None:
        what += f" on GPU {lead.gpu}"
    threshold = policy.match.threshold
    if threshold is not None and hit.streak is not None:
        if threshold.above is not None:
            what += f" (≥ {threshold.above:g}"
        elif threshold.below is not None:
            what += f" (≤ {threshold.below:g}"
        else:
            what += " (present"
        held = format_duration(timedelta(seconds=int(hit.streak.held.total_seconds())))
        what += f" for {held})"
    return what


def _selects(policy: Policy, node: str, history: History) -> bool:
    selector = policy.nodes
    if selector.pools is not None and history.pools.get(node) not in selector.pools:
        return False
    return not selector.labels or _subset(selector.labels, history.labels.get(node, {}))


def _subset(wanted: Mapping[str, str], have: Mapping[str, str]) -> bool:
    return all(have.get(k) == v for k, v in wanted.items())


def _live_streaks(
    streaks: Mapping[StreakKey, Streak], by_name: Mapping[str, Policy], now: datetime
) -> dict[StreakKey, Streak]:
    """Drop streaks of policies that are gone and streaks whose readings stopped coming."""
    live: dict[StreakKey, Streak] = {}
    for key, streak in streaks.items():
        policy = by_name.get(key[0])
        threshold = policy.match.threshold if policy is not None else None
        if threshold is not None and now - streak.last <= threshold.gap:
            live[key] = streak
    return live


def _live_events(
    events: Mapping[EventKey, tuple[BurstEvent, ...]], by_name: Mapping[str, Policy], now: datetime
) -> dict[EventKey, tuple[BurstEvent, ...]]:
    live: dict[EventKey, tuple[BurstEvent, ...]] = {}
    for key, found in events.items():
        policy = by_name.get(key[0])
        burst = policy.match.burst if policy is not None else None
        if burst is None:
            continue
        kept = tuple(e for e in found if e[0] > now - burst.within)
        if kept:
            live[key] = kept
    return live


def cooldown_until(
    policy: Policy, node: str, history: History, now: datetime, settings: GlobalSettings
) -> datetime | None:
    """When the node+policy pair's cooldown ends, if it is running at `now`."""
    cooldown = policy.cooldown if policy.cooldown is not None else settings.default_cooldown
    started = [
        r.started_at
        for r in history.past.get(node, ())
        if r.policy == policy.name and r.started_at > now - cooldown
    ]
    return max(started) + cooldown if started else None


def explain(
    signal: Signal,
    history: History,
    policies: Sequence[Policy],
    now: datetime,
    settings: GlobalSettings,
) -> tuple[str, str]:
    """(class, text): why a signal that was evaluated decided nothing, read off the policies it
    matches in priority order, the way evaluate went through them. The caller has already
    ruled out an open remediation of the node and a human's cancel."""
    matching = [
        p
        for p in sorted(policies, key=lambda p: (-p.priority, p.name))
        if p.match.kind is signal.kind
        and (p.match.codes is None or signal.code in p.match.codes)
        and (not p.match.labels or _subset(p.match.labels, signal.labels))
        and _selects(p, signal.node, history)
    ]
    if not matching:
        return "no_policy", "no policy matches"
    for policy in matching:
        until = cooldown_until(policy, signal.node, history, now, settings)
        if until is not None:
            return "cooldown", f"in cooldown until {until.isoformat()} ({policy.name})"
        match = policy.match
        if match.threshold is not None:
            level = match.threshold.above if match.threshold.above is not None else None
            level = level if level is not None else match.threshold.below
            held = format_duration(match.threshold.for_)
            shown = "present" if level is None else f"{level:g}"
            return "below_threshold", f"below threshold ({policy.name}: {shown} for {held})"
        if match.burst is not None:
            return (
                "burst_not_reached",
                f"below the burst ({policy.name}: {match.burst.count} within "
                f"{format_duration(match.burst.within)})",
            )
        if match.repeat is not None:
            continue  # not a repeat: the next policy down decides
    return "not_decided", f"no decision ({matching[0].name})"
