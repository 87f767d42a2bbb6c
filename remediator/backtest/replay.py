"""Replay a recording through the controller's own decision path: the fold, `evaluate`, the
cluster state and `admit`, cycle by cycle in time order, with the remediations it opens holding
their node for as long as the real ones took.

Only readings that can change a decision are rebuilt, so a month of a large fleet replays in
seconds: a reading that breaches some policy's threshold comes at every cycle of its run (it
moves a streak), and so do the hysteresis-band runs right after it; the first cleared reading
after them ends the streak; other readings change nothing and are skipped. An event kind
comes only at the cycles where the fold would let it through (the fold still decides, the
replay merely skips what it would drop). Kinds no policy looks at are not replayed at all.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import statistics
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from remediator.backtest.recording import RealRemediation, Recording
from remediator.errors import PolicyError, RemediatorError
from remediator.model.states import State
from remediator.policy.budget import BreakerState, admit
from remediator.policy.evaluate import Decision, EvalState, History, PastRemediation, evaluate
from remediator.policy.ladder import ladder_from_policy
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.policy.schema import Policy, Threshold
from remediator.remediation.intake import (
    DEFAULT_FOLD_WINDOW,
    Inventory,
    cleared_reason,
    cluster_state,
)
from remediator.signals.dedup import DEFAULT_KIND_WINDOWS, READING_KINDS, SignalFolder
from remediator.signals.model import Signal, SignalKind
from remediator.store.archive import ArchivedRun, Levels, RunFilter
from remediator.store.records import RemediationRecord

# A remediation the record does not show (the proposed set opened it) holds its node this long
# when no real remediation of its policy tells how long they take.
DEFAULT_HOLD = timedelta(minutes=30)
# A replayed remediation is the real one when node and policy agree within this much time.
DEFAULT_TOLERANCE = timedelta(minutes=1)
REPLACE = "replace"

PolicyTimeline = Sequence[tuple[datetime, PolicySet]]


@dataclass(frozen=True, slots=True)
class Opened:
    node: str
    policy: str
    pool: str | None
    at: datetime
    ladder: tuple[str, ...]
    dry_run: bool
    disruptive: bool
    reason: str
    until: datetime | None  # when it stops holding its node; None: past the end of the record
    admitted_at: datetime | None = None  # None: never admitted (see closed_at)
    closed_at: datetime | None = None  # closed while queued (None: still queued at the end)
    closed_reason: str = ""


@dataclass(frozen=True, slots=True)
class HeldAt:
    node: str
    policy: str
    at: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class Trip:
    at: datetime
    reason: str


@dataclass(frozen=True)
class Replay:
    opened: tuple[Opened, ...]
    held: tuple[HeldAt, ...]
    trips: tuple[Trip, ...]
    cycles: int
    readings: int


class BacktestError(RemediatorError):
    """A policy set cannot be loaded for the replay."""


def load_files(files: Mapping[str, str]) -> PolicySet:
    """A policy set from stored file texts, through the same loader as the controller."""
    with tempfile.TemporaryDirectory(prefix="remediator-policies-") as tmp:
        directory = Path(tmp)
        for name, text in files.items():
            (directory / Path(name).name).write_text(text, encoding="utf-8")
        try:
            return load_policy_dir(directory)
        except PolicyError as exc:
            raise BacktestError("; ".join(exc.problems)) from exc


def run_filter(timelines: Sequence[PolicyTimeline]) -> RunFilter:
    """The archive rows a replay of these policy sets needs (see store.archive.RunFilter)."""
    every: set[str] = set()
    found: dict[str, dict[str, list[float]]] = {}
    for timeline in timelines:
        for _, policies in timeline:
            for policy in policies.policies:
                kind = policy.match.kind.value
                threshold = policy.match.threshold
                if policy.match.kind not in READING_KINDS or threshold is None or _bare(threshold):
                    every.add(kind)
                    continue
                bounds = found.setdefault(kind, {})
                if threshold.above is not None:
                    keep = threshold.clear if threshold.clear is not None else threshold.above
                    bounds.setdefault("breach_above", []).append(threshold.above)
                    bounds.setdefault("keep_above", []).append(keep)
                elif threshold.below is not None:
                    keep = threshold.clear if threshold.clear is not None else threshold.below
                    bounds.setdefault("breach_below", []).append(threshold.below)
                    bounds.setdefault("keep_below", []).append(keep)
    levels = {
        kind: Levels(
            breach_above=min(b["breach_above"]) if "breach_above" in b else None,
            keep_above=min(b["keep_above"]) if "keep_above" in b else None,
            breach_below=max(b["breach_below"]) if "breach_below" in b else None,
            keep_below=max(b["keep_below"]) if "keep_below" in b else None,
        )
        for kind, b in found.items()
        if kind not in every
    }
    return RunFilter(frozenset(every), levels)


def _bare(threshold: Threshold) -> bool:
    return threshold.above is None and threshold.below is None


def _matches(policy: Policy, run: ArchivedRun) -> bool:
    match = policy.match
    if match.kind is not run.kind:
        return False
    if match.codes is not None and run.code not in match.codes:
        return False
    return all(run.labels.get(k) == v for k, v in match.labels.items())


def _breaches(policies: Sequence[Policy], run: ArchivedRun) -> bool:
    """A reading of this run can start a streak (or hits outright) for some policy."""
    return any(p.match.threshold is None or p.match.threshold.breached(run.value) for p in policies)


def _keeps(policies: Sequence[Policy], run: ArchivedRun) -> bool:
    """A reading of this run does not end a running streak for some policy (hysteresis)."""
    return any(
        p.match.threshold is not None and not p.match.threshold.cleared(run.value) for p in policies
    )


class _Streams:
    """The readings to replay, merged into cycle order."""

    def __init__(
        self,
        recording: Recording,
        policies: Sequence[Policy],
        fold_window: timedelta,
        kind_windows: Mapping[SignalKind, timedelta],
    ) -> None:
        self.cycles = recording.cycles
        by_kind: dict[SignalKind, list[Policy]] = {}
        for policy in policies:
            by_kind.setdefault(policy.match.kind, []).append(policy)
        self._lists: list[tuple[ArchivedRun, list[datetime], list[datetime]]] = []
        previous_active: dict[tuple[str, int | None, str, int | None, str], bool] = {}
        # Keyed as the live fold keys them (Signal.dedup_key): the GPU's UUID, else its index.
        events: dict[tuple[str, int | str | None, SignalKind, int | None], list[ArchivedRun]] = {}
        for run in recording.runs:
            candidates = [p for p in by_kind.get(run.kind, ()) if _matches(p, run)]
            if not candidates:
                continue
            if run.kind not in READING_KINDS:
                key = (run.node, run.gpu_uuid or run.gpu, run.kind, run.code)
                events.setdefault(key, []).append(run)
                continue
            # A breach starts a streak; a reading in the hysteresis band only carries one that
            # runs, so it matters only right after readings that did; the first cleared
            # reading after them ends the streak; every other reading changes nothing.
            was_active = previous_active.get(run.key, False)
            active = _breaches(candidates, run) or (was_active and _keeps(candidates, run))
            previous_active[run.key] = active
            if active:
                self._lists.append((run, *self._times(run)))
            elif was_active:
                first = self._cycles(run)[:1]
                self._lists.append((run, first, run.observed_times(first)))
        for runs in events.values():
            window = kind_windows.get(runs[0].kind, fold_window)
            self._fold_walk(runs, window)

    def _cycles(self, run: ArchivedRun) -> list[datetime]:
        """The cycles of the run's readings."""
        cycles = self.cycles.get(run.source, [])
        lo = bisect.bisect_left(cycles, run.first_at)
        hi = bisect.bisect_right(cycles, run.last_at or run.first_at)
        return cycles[lo:hi] or [run.first_at]

    def _times(self, run: ArchivedRun) -> tuple[list[datetime], list[datetime]]:
        """The cycles of the run's readings, and each reading's own observed time."""
        times = self._cycles(run)
        return times, run.observed_times(times)

    def _fold_walk(self, runs: list[ArchivedRun], window: timedelta) -> None:
        """The cycles at which the fold can let a run's reading through: one a window after the
        last one let through. Runs of one key that overlap in time (two sources) are replayed
        whole; the fold sorts them out."""
        runs.sort(key=lambda r: r.first_at)
        overlapping = any(
            b.first_at <= (a.last_at or a.first_at) for a, b in itertools.pairwise(runs)
        )
        last: datetime | None = None
        for run in runs:
            times, observed = self._times(run)
            if overlapping:
                self._lists.append((run, times, observed))
                continue
            picked: list[int] = []
            index = 0
            while index < len(times):
                if last is not None:
                    index = max(index, bisect.bisect_left(observed, last + window))
                    if index >= len(times):
                        break
                picked.append(index)
                last = observed[index]
                index += 1
            if picked:
                self._lists.append((run, [times[i] for i in picked], [observed[i] for i in picked]))

    def __iter__(self) -> Iterator[tuple[datetime, list[Signal]]]:
        heap: list[tuple[datetime, int, int]] = []
        for number, (_, times, _) in enumerate(self._lists):
            if times:
                heap.append((times[0], number, 0))
        heapq.heapify(heap)
        current: datetime | None = None
        batch: list[Signal] = []
        while heap:
            at, number, index = heapq.heappop(heap)
            run, times, observed = self._lists[number]
            if index + 1 < len(times):
                heapq.heappush(heap, (times[index + 1], number, index + 1))
            if current is not None and at != current:
                yield current, batch
                batch = []
            current = at
            batch.append(_signal(run, observed[index]))
        if current is not None:
            yield current, batch


def _signal(run: ArchivedRun, observed: datetime) -> Signal:
    # Rows came from our own validated signals: no second validation per reading.
    return Signal.model_construct(
        node=run.node,
        kind=run.kind,
        source=run.source,
        observed_at=observed,
        gpu=run.gpu,
        gpu_uuid=run.gpu_uuid,
        code=run.code,
        value=run.value,
        labels=dict(run.labels),
    )


@dataclass(slots=True)
class _Open:
    policy: str
    pool: str | None
    dry_run: bool
    until: datetime | None
    # Its ladder replaces the node: once the node has left, the replacement is in flight.
    replaces: bool = False


class _Holds:
    """How long a replayed remediation holds its node once admitted: as long as the work of the
    real one it reproduces took (from the real one's own admission, so a queue in history is
    not counted twice), else the median of its policy's real ones, else of all real ones, else
    DEFAULT_HOLD. A queued one holds from its admission in the replay, as in the controller."""

    def __init__(self, real: Sequence[RealRemediation], tolerance: timedelta) -> None:
        self.tolerance = tolerance
        self._by_node: dict[tuple[str, str], list[RealRemediation]] = {}
        durations: dict[str, list[float]] = {}
        for item in real:
            self._by_node.setdefault((item.node, item.policy), []).append(item)
            if item.ended_at is not None:
                seconds = max(0.0, (item.ended_at - item.started_at).total_seconds())
                durations.setdefault(item.policy, []).append(seconds)
        self._median = {p: statistics.median(d) for p, d in durations.items()}
        every = [s for d in durations.values() for s in d]
        self._overall = statistics.median(every) if every else DEFAULT_HOLD.total_seconds()

    def until(
        self, node: str, policy: str, decided: datetime, admitted: datetime
    ) -> datetime | None:
        """`decided`: when the replay decided it (matched to history by it); `admitted`: when
        a budget let it act, from which it holds its node."""
        for item in self._by_node.get((node, policy), ()):
            if abs(item.created_at - decided) <= self.tolerance:
                if item.ended_at is None:
                    return None
                return admitted + max(timedelta(0), item.ended_at - item.started_at)
        seconds = self._median.get(policy, self._overall)
        return admitted + timedelta(seconds=seconds)


def replay(
    recording: Recording,
    timeline: PolicyTimeline,
    *,
    fold_window: timedelta = DEFAULT_FOLD_WINDOW,
    kind_windows: Mapping[SignalKind, timedelta] = DEFAULT_KIND_WINDOWS,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> Replay:
    """One replay of the whole recording under `timeline` (policy sets by activation time; the
    first also applies before its time)."""
    if not timeline:
        raise BacktestError("no policy set to replay")
    starts = [at for at, _ in timeline]
    every_policy = [p for _, policies in timeline for p in policies.policies]
    streams = _Streams(recording, every_policy, fold_window, kind_windows)
    holds = _Holds(recording.remediations, tolerance)
    folder = SignalFolder(fold_window, windows=kind_windows)

    open_: dict[str, _Open] = {}
    past: dict[str, tuple[PastRemediation, ...]] = {}
    for item in recording.remediations:
        if item.created_at >= recording.since:
            continue
        past[item.node] = (
            *past.get(item.node, ()),
            PastRemediation(item.node, item.policy, item.created_at, item.state),
        )
        if item.ended_at is None or item.ended_at > recording.since:
            open_[item.node] = _Open(
                item.policy, item.pool, item.dry_run, item.ended_at, REPLACE in item.ladder
            )
    real_fencing: dict[str, list[tuple[datetime, datetime | None]]] = {}
    for item in recording.remediations:
        real_fencing.setdefault(item.node, []).append((item.created_at, item.ended_at))
    # As the live intake does (without_brought_machines): a machine a replacement brought is
    # validated by that remediation, not taken for a scale-up.
    brought = {item.new_node for item in recording.remediations if item.new_node}

    pools: dict[str, str] = {}
    labels: dict[str, Mapping[str, str]] = {}
    not_ready: set[str] = set()
    cordoned: set[str] = set()
    changes = sorted(recording.nodes, key=lambda c: c.at)
    next_change = 0
    counts: dict[str, int] | None = None  # nodes per pool, made again after a change

    eval_state = EvalState()
    breaker = BreakerState()
    opened: list[Opened] = []
    held: list[HeldAt] = []
    trips: list[Trip] = []
    cycles = readings = 0

    by_name = {p.name: p for _, policies in timeline for p in policies.policies}
    queued: dict[str, RemediationRecord] = {}  # node → its queued remediation
    entry: dict[str, int] = {}  # node → index in `opened` of its queued remediation
    every_cycle = sorted({at for times in recording.cycles.values() for at in times})
    # Cycles at which a remediation's end may free a budget, or a node's change (it left, it
    # came back ready) may close or admit a queued one: the controller looks at every poll.
    wakes = sorted(
        {
            every_cycle[at]
            for at in (bisect.bisect_left(every_cycle, c.at) for c in changes)
            if at < len(every_cycle)
        }
    )

    for now, signals in _with_wakes(iter(streams), wakes):
        if now >= recording.until:
            break
        if now < recording.since:
            continue
        cycles += 1
        readings += len(signals)
        for node in [n for n, o in open_.items() if o.until is not None and o.until <= now]:
            del open_[node]
        while next_change < len(changes) and changes[next_change].at <= now:
            change = changes[next_change]
            next_change += 1
            counts = None
            if change.present:
                pools[change.node] = change.pool
                labels[change.node] = change.labels
            else:
                pools.pop(change.node, None)
                labels.pop(change.node, None)
            for flags, on in ((not_ready, not change.ready), (cordoned, change.cordoned)):
                if on and change.present:
                    flags.add(change.node)
                else:
                    flags.discard(change.node)
        policies = timeline[max(0, bisect.bisect_right(starts, now) - 1)][1]
        signals = [
            s for s in signals if s.kind is not SignalKind.UNVALIDATED or s.node not in brought
        ]
        fresh = folder.fold(signals, now) if signals else ()
        if not fresh and not queued:
            continue
        decisions: list[Decision] = []
        if fresh:
            history = History(
                open={
                    **{node: o.policy for node, o in open_.items()},
                    **{node: r.policy for node, r in queued.items()},
                },
                past=past,
                pools=pools,
                labels=labels,
                state=eval_state,
            )
            evaluation = evaluate(fresh, history, policies.policies, now, policies.settings)
            eval_state = evaluation.state
            decisions = list(evaluation.decisions)
        if counts is None:
            counts = Inventory(pools=pools).nodes_per_pool()
        inventory = _Inventory(
            counts=counts,
            pools=pools,
            labels=labels,
            not_ready=frozenset(n for n in not_ready if not _fenced(real_fencing, n, now)),
            cordoned=frozenset(n for n in cordoned if not _fenced(real_fencing, n, now)),
        )
        for node, record in list(queued.items()):
            why = cleared_reason(record, fresh, inventory, by_name.get(record.policy))
            if why is not None:
                del queued[node]  # its cause cleared while it waited: closed, never admitted
                index = entry.pop(node)
                if node not in pools:
                    why += _replaced_by(recording.remediations, node, now)
                opened[index] = replace(opened[index], until=now, closed_at=now, closed_reason=why)
        if not decisions and not queued:
            continue
        reset = recording.breaker.reset_at
        tripped_at = breaker.tripped_at
        if reset is not None and tripped_at is not None and tripped_at < reset <= now:
            breaker = BreakerState()  # a human reset it then
        fencing = [_record(node, o, now, gone=node not in pools) for node, o in open_.items()]
        candidates: list[Decision | RemediationRecord] = [*decisions, *queued.values()]
        admission = admit(
            candidates,
            cluster_state(
                inventory,
                [*fencing, *queued.values()],
                {p.name: p.scope for p in policies.policies},
            ),
            policies.settings,
            breaker,
            now,
            counted=frozenset(queued),
        )
        if admission.breaker.tripped and not breaker.tripped:
            trips.append(Trip(now, admission.breaker.reason or "storm breaker tripped"))
        breaker = admission.breaker
        for candidate in admission.admitted:
            node = candidate.node
            if isinstance(candidate, RemediationRecord):  # admitted from the queue
                del queued[node]
                index = entry.pop(node)
                until = holds.until(node, candidate.policy, opened[index].at, now)
                opened[index] = replace(opened[index], until=until, admitted_at=now)
                replaces = any(step.get("action") == REPLACE for step in candidate.ladder)
                open_[node] = _Open(
                    candidate.policy, candidate.pool, candidate.dry_run, until, replaces
                )
            else:
                until = holds.until(node, candidate.policy, now, now)
                replaces = any(s.action == REPLACE for s in ladder_from_policy(candidate.actions))
                open_[node] = _Open(
                    candidate.policy, candidate.pool, candidate.dry_run, until, replaces
                )
                _remember(past, candidate, now)
                opened.append(_opened(candidate, now, until))
            if until is not None:
                at = bisect.bisect_left(every_cycle, until)
                if at < len(every_cycle):
                    heapq.heappush(wakes, every_cycle[at])
        for hold in admission.held:
            candidate = hold.decision
            held.append(HeldAt(candidate.node, candidate.policy, now, hold.reason))
            if isinstance(candidate, Decision):  # a new decision waits in the queue
                queued[candidate.node] = _queued(candidate, now)
                _remember(past, candidate, now)
                entry[candidate.node] = len(opened)
                opened.append(_opened(candidate, now, None, admitted=False))
    return Replay(tuple(opened), tuple(held), tuple(trips), cycles, readings)


def _replaced_by(real: Sequence[RealRemediation], node: str, now: datetime) -> str:
    """Which real remediation took the node out of the cluster, if one did."""
    taken = [r for r in real if r.node == node and r.created_at <= now and r.state != "cancelled"]
    if not taken:
        return ""
    last = taken[-1]
    return f" (history's {last.policy} remediation from {last.created_at.isoformat()} took it out)"


def _with_wakes(
    streams: Iterator[tuple[datetime, list[Signal]]], wakes: list[datetime]
) -> Iterator[tuple[datetime, list[Signal]]]:
    """The readings' cycles, and in between the cycles at which a remediation ends (queued ones
    are offered to the budgets again there, as the controller does every poll)."""
    upcoming = next(streams, None)
    while upcoming is not None or wakes:
        if wakes and (upcoming is None or wakes[0] < upcoming[0]):
            at = heapq.heappop(wakes)
            yield at, []
            continue
        assert upcoming is not None
        while wakes and wakes[0] == upcoming[0]:
            heapq.heappop(wakes)
        yield upcoming
        upcoming = next(streams, None)


def _remember(
    past: dict[str, tuple[PastRemediation, ...]], decision: Decision, now: datetime
) -> None:
    past[decision.node] = (
        *past.get(decision.node, ()),
        PastRemediation(
            decision.node,
            decision.policy,
            now,
            State.DETECTED.value,
            decision.signals[0].kind.value if decision.signals else None,
        ),
    )


def _opened(
    decision: Decision, now: datetime, until: datetime | None, *, admitted: bool = True
) -> Opened:
    return Opened(
        node=decision.node,
        policy=decision.policy,
        pool=decision.pool or None,
        at=now,
        ladder=tuple(s.action for s in ladder_from_policy(decision.actions)),
        dry_run=decision.dry_run,
        disruptive=decision.disruptive,
        reason=decision.reason,
        until=until,
        admitted_at=now if admitted else None,
    )


def _queued(decision: Decision, now: datetime) -> RemediationRecord:
    """The queued remediation a held decision opens, as the intake stores it."""
    return replace(
        _record(decision.node, _Open(decision.policy, decision.pool, decision.dry_run, None), now),
        state=State.QUEUED,
        policy_priority=decision.priority,
        signals=decision.signals,
        ladder=tuple(step.to_json() for step in ladder_from_policy(decision.actions)),
        reason=decision.reason,
    )


@dataclass(frozen=True)
class _Inventory(Inventory):
    """The inventory with its per-pool counts made once per change of the pools, not at every
    decision (the controller builds a new inventory per LIST anyway)."""

    counts: Mapping[str, int] = field(default_factory=dict)

    def nodes_per_pool(self) -> dict[str, int]:
        return dict(self.counts)


def _fenced(
    real: Mapping[str, list[tuple[datetime, datetime | None]]], node: str, now: datetime
) -> bool:
    """A node the real history had under remediation: its cordon and NotReady were ours, and
    the replay models its own remediations instead."""
    return any(start <= now and (end is None or now < end) for start, end in real.get(node, ()))


def _record(node: str, item: _Open, now: datetime, *, gone: bool = False) -> RemediationRecord:
    """The few fields cluster_state reads, in the record type it takes. A remediation whose
    ladder replaces and whose node has left is replacing: the controller counts it until its
    new machine is in (cluster_state's REPLACEMENT_STATES), not only while the old one is."""
    return RemediationRecord(
        id=0,
        cluster="",
        node=node,
        pool=item.pool,
        policy=item.policy,
        policy_priority=0,
        policy_commit=None,
        policy_hash=None,
        state=State.REPLACING if gone and item.replaces else State.DETECTED,
        dry_run=item.dry_run,
        approval_required=False,
        reason="",
        signal_kind="",
        xid_code=None,
        signals=(),
        ladder=(),
        step_index=0,
        idempotency_key="",
        replacement_operation_id=None,
        new_node=None,
        hold_reason=None,
        error=None,
        attempts=0,
        next_attempt_at=None,
        version=1,
        created_at=now,
        updated_at=now,
        finished_at=None,
    )
