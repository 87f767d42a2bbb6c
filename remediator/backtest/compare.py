"""Two replays (and history) side by side: which remediations a policy change adds, removes or
changes, which budget holds and breaker trips move, and where the baseline replay fails to
reproduce what really happened. Pure: replays in, a report value out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

from remediator.backtest.recording import RealRemediation
from remediator.backtest.replay import HeldAt, Opened, Replay, Trip

# One fault seen by both policy sets may be acted on at different times: pair within this.
PAIR_WINDOW = timedelta(hours=1)
# Holds of a node by one policy closer than this are one episode (a held decision comes back
# every cycle for readings and every fold window for events).
HOLD_GAP = timedelta(minutes=30)

A = TypeVar("A")
B = TypeVar("B")


@dataclass(frozen=True)
class Item:
    """One line of the report; `policy` and `node` always, `at` the time it happened."""

    node: str
    policy: str
    at: datetime
    detail: str = ""
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "node": self.node,
            "policy": self.policy,
            "time": self.at.isoformat(),
            "detail": self.detail,
        }
        if self.before:
            body["before"] = self.before
        if self.after:
            body["after"] = self.after
        return body


@dataclass(frozen=True)
class HoldEpisode:
    node: str
    policy: str
    start: datetime
    end: datetime
    count: int
    reason: str


@dataclass(frozen=True)
class Report:
    since: datetime
    until: datetime
    baseline_name: str
    proposed_name: str
    baseline: Replay
    proposed: Replay
    added: tuple[Item, ...]
    removed: tuple[Item, ...]
    changed: tuple[Item, ...]
    mismatches: tuple[Item, ...]
    holds_added: tuple[Item, ...]
    holds_removed: tuple[Item, ...]
    trips_baseline: tuple[Trip, ...]
    trips_proposed: tuple[Trip, ...]
    history_count: int
    cluster: str = ""

    @property
    def trips_changed(self) -> bool:
        return [t.at for t in self.trips_baseline] != [t.at for t in self.trips_proposed]

    def per_policy(self) -> dict[str, dict[str, int]]:
        return _tally(lambda item: item.policy, self)

    def per_node(self) -> dict[str, dict[str, int]]:
        return _tally(lambda item: item.node, self)

    def out_of_service(self) -> dict[str, list[str]]:
        """Nodes a disruptive remediation took out, under each set, and the difference."""
        base = _taken(self.baseline.opened)
        new = _taken(self.proposed.opened)
        return {
            "baseline": sorted(base),
            "proposed": sorted(new),
            "added": sorted(new - base),
            "removed": sorted(base - new),
        }

    def days(self) -> list[dict[str, Any]]:
        """Per UTC day: remediations under each set and the differences."""
        counts: dict[date, Counter[str]] = {}
        day = self.since.date()
        while day <= (self.until - timedelta(microseconds=1)).date():
            counts[day] = Counter()
            day += timedelta(days=1)
        for name, items in (
            ("baseline", [o.at for o in self.baseline.opened]),
            ("proposed", [o.at for o in self.proposed.opened]),
            ("added", [i.at for i in self.added]),
            ("removed", [i.at for i in self.removed]),
            ("changed", [i.at for i in self.changed]),
            ("holds_added", [i.at for i in self.holds_added]),
            ("holds_removed", [i.at for i in self.holds_removed]),
        ):
            for at in items:
                counts.setdefault(at.date(), Counter())[name] += 1
        keys = ("baseline", "proposed", "added", "removed", "changed", "holds_added")
        return [
            {"day": d.isoformat(), **{k: counts[d][k] for k in (*keys, "holds_removed")}}
            for d in sorted(counts)
        ]


def _taken(opened: Iterable[Opened]) -> set[str]:
    return {o.node for o in opened if o.disruptive and not o.dry_run}


def _tally(key: Callable[[Item], str], report: Report) -> dict[str, dict[str, int]]:
    table: dict[str, Counter[str]] = {}
    for name, items in (
        ("added", report.added),
        ("removed", report.removed),
        ("changed", report.changed),
        ("holds_added", report.holds_added),
        ("holds_removed", report.holds_removed),
    ):
        for item in items:
            table.setdefault(key(item), Counter())[name] += 1
    return {k: dict(v) for k, v in sorted(table.items())}


def pair(
    left: Sequence[A],
    right: Sequence[B],
    node: Callable[[A | B], str],
    at: Callable[[A | B], datetime],
    window: timedelta,
    same: Callable[[A, B], bool] | None = None,
) -> tuple[list[tuple[A, B]], list[A], list[B]]:
    """Pair items of one node closest in time within `window` (preferring `same` ones)."""
    by_node: dict[str, list[int]] = {}
    for index, other in enumerate(right):
        by_node.setdefault(node(other), []).append(index)
    taken: set[int] = set()
    pairs: list[tuple[A, B]] = []
    lonely: list[A] = []
    for item in sorted(left, key=at):
        best: tuple[tuple[bool, timedelta], int] | None = None
        for index in by_node.get(node(item), ()):
            if index in taken:
                continue
            distance = abs(at(right[index]) - at(item))
            if distance > window:
                continue
            alike = same(item, right[index]) if same is not None else True
            rank = (not alike, distance)
            if best is None or rank < best[0]:
                best = (rank, index)
        if best is None:
            lonely.append(item)
        else:
            taken.add(best[1])
            pairs.append((item, right[best[1]]))
    rest = [other for index, other in enumerate(right) if index not in taken]
    return pairs, lonely, rest


def _node(item: Opened | RealRemediation | HoldEpisode) -> str:
    return item.node


def _at(item: Opened | RealRemediation) -> datetime:
    return item.at if isinstance(item, Opened) else item.created_at


def _admission_change(before: Opened, after: Opened, tolerance: timedelta) -> str | None:
    """How much longer (or shorter) a budget kept it queued, if that moved."""
    if before.admitted_at is None and after.admitted_at is None:
        return None
    if after.admitted_at is None:
        return f"queued, {_unadmitted(after)}"
    if before.admitted_at is None:
        return f"admitted at {after.admitted_at.isoformat()} (before: {_unadmitted(before)})"
    shift = (after.admitted_at - after.at) - (before.admitted_at - before.at)
    if abs(shift) <= tolerance:
        return None
    seconds = int(shift.total_seconds())
    return f"admitted {'+' if seconds > 0 else ''}{seconds}s later than before"


def _unadmitted(item: Opened) -> str:
    """What became of a remediation a budget held and never admitted."""
    if item.closed_at is not None:
        when = item.closed_at.isoformat()
        return f"closed at {when} without being admitted: {item.closed_reason}"
    return "still queued at the end of the record"


def _outcome(item: Opened | None) -> str:
    if item is None:
        return ""
    if item.admitted_at is not None:
        return f"admitted at {item.admitted_at.isoformat()}"
    return _unadmitted(item)


def _opened_item(item: Opened, detail: str, *, side: str) -> Item:
    """An added remediation is described under `after`, a removed one under `before`."""
    described = _describe(item)
    if side == "before":
        return Item(item.node, item.policy, item.at, detail, before=described)
    return Item(item.node, item.policy, item.at, detail, after=described)


def _describe(item: Opened) -> dict[str, Any]:
    return {
        "policy": item.policy,
        "time": item.at.isoformat(),
        "ladder": list(item.ladder),
        "dry_run": item.dry_run,
        "reason": item.reason,
        # None: a budget held it, and it was still queued at the end, or closed (`closed`).
        "admitted": item.admitted_at.isoformat() if item.admitted_at else None,
        "closed": item.closed_at.isoformat() if item.closed_at else None,
        "closed_reason": item.closed_reason or None,
    }


def compare(
    baseline: Replay,
    proposed: Replay,
    history: Sequence[RealRemediation],
    *,
    since: datetime,
    until: datetime,
    tolerance: timedelta,
    baseline_name: str = "baseline",
    proposed_name: str = "proposed",
    cluster: str = "",
) -> Report:
    pairs, removed, added = pair(
        baseline.opened,
        proposed.opened,
        _node,
        _at,
        PAIR_WINDOW,
        lambda a, b: a.policy == b.policy,
    )
    changed: list[Item] = []
    for before, after in pairs:
        what = []
        if before.policy != after.policy:
            what.append(f"policy {before.policy} → {after.policy}")
        if before.ladder != after.ladder:
            what.append(f"ladder {'→'.join(before.ladder)} → {'→'.join(after.ladder)}")
        if abs(after.at - before.at) > tolerance:
            shift = int((after.at - before.at).total_seconds())
            what.append(f"time {'+' if shift > 0 else ''}{shift}s")
        waited = _admission_change(before, after, tolerance)
        if waited:
            what.append(waited)
        if before.dry_run != after.dry_run:
            what.append(f"dry run {before.dry_run} → {after.dry_run}")
        if what:
            changed.append(
                Item(
                    after.node,
                    after.policy,
                    after.at,
                    "; ".join(what),
                    before=_describe(before),
                    after=_describe(after),
                )
            )

    real = [r for r in history if since <= r.created_at < until]
    matched, replay_only, real_only = pair(
        baseline.opened,
        real,
        _node,
        _at,
        tolerance,
        lambda a, b: a.policy == b.policy,
    )
    mismatches = [
        Item(
            o.node, o.policy, o.at, "the baseline replay opened it; history has no such remediation"
        )
        for o in replay_only
    ] + [
        Item(
            r.node,
            r.policy,
            r.created_at,
            f"happened ({r.state}); the baseline replay did not open it",
        )
        for r in real_only
    ]
    # A pair is only a match when the policies agree.
    for replayed, happened in matched:
        if replayed.policy == happened.policy:
            continue
        mismatches.append(
            Item(
                replayed.node,
                replayed.policy,
                replayed.at,
                f"history decided policy {happened.policy} here",
            )
        )

    base_holds = episodes(baseline.held)
    new_holds = episodes(proposed.held)
    holds_added = [
        _hold_item(h, proposed.opened) for h in new_holds if not _overlaps(h, base_holds)
    ]
    holds_removed = [
        _hold_item(h, baseline.opened) for h in base_holds if not _overlaps(h, new_holds)
    ]

    def order(items: Iterable[Item]) -> tuple[Item, ...]:
        return tuple(sorted(items, key=lambda i: (i.at, i.node, i.policy)))

    return Report(
        since=since,
        until=until,
        baseline_name=baseline_name,
        proposed_name=proposed_name,
        baseline=baseline,
        proposed=proposed,
        added=order(
            _opened_item(o, "only under the proposed policies", side="after") for o in added
        ),
        removed=order(
            _opened_item(o, "only under the baseline policies", side="before") for o in removed
        ),
        changed=order(changed),
        mismatches=order(mismatches),
        holds_added=order(holds_added),
        holds_removed=order(holds_removed),
        trips_baseline=baseline.trips,
        trips_proposed=proposed.trips,
        history_count=len(real),
        cluster=cluster,
    )


def episodes(held: Sequence[HeldAt]) -> list[HoldEpisode]:
    found: list[HoldEpisode] = []
    current: dict[tuple[str, str], HoldEpisode] = {}
    for item in sorted(held, key=lambda h: h.at):
        key = (item.node, item.policy)
        episode = current.get(key)
        if episode is not None and item.at - episode.end <= HOLD_GAP:
            current[key] = HoldEpisode(
                item.node, item.policy, episode.start, item.at, episode.count + 1, episode.reason
            )
            continue
        if episode is not None:
            found.append(episode)
        current[key] = HoldEpisode(item.node, item.policy, item.at, item.at, 1, item.reason)
    found.extend(current.values())
    return sorted(found, key=lambda e: (e.start, e.node, e.policy))


def _overlaps(episode: HoldEpisode, others: Sequence[HoldEpisode]) -> bool:
    return any(
        o.node == episode.node
        and o.policy == episode.policy
        and o.start <= episode.end + HOLD_GAP
        and episode.start <= o.end + HOLD_GAP
        for o in others
    )


def _hold_item(episode: HoldEpisode, opened: Sequence[Opened]) -> Item:
    """The episode from its first hold, and how it ended: the (last) queued remediation it
    held was admitted, closed, or still waited at the end."""
    held = [
        o
        for o in opened
        if o.node == episode.node
        and o.policy == episode.policy
        and episode.start <= o.at <= episode.end
    ]
    times = "once" if episode.count == 1 else f"{episode.count} times"
    if episode.count > 1:
        times += f" from {episode.start.isoformat()} to {episode.end.isoformat()}"
    else:
        times += f" at {episode.start.isoformat()}"
    outcome = _outcome(held[-1] if held else None)
    return Item(
        episode.node,
        episode.policy,
        episode.start,
        f"held {times} ({episode.reason})" + (f"; {outcome}" if outcome else ""),
    )
