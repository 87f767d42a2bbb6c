"""Whether a node's agent is alive: from what the kubelet reports of its DaemonSet pod, and from
its last heartbeat.

Heartbeats alone cannot say it fast at scale: a fleet held to a heartbeat budget is asked for a
long period (10,000 agents at 10 a second: every 1,000 s), and silence is three missed beats of
it (model/heartbeats.py), 50 minutes in which the node's XIDs go unseen. The kubelet already
reports each agent pod's readiness and restarts, and the controller watches those pods: a
crash-looping agent is known as soon as the kubelet backs off, a dead one once its pod has not
been Ready for `not_ready_after`, at any fleet size and with no request per agent. Heartbeats
still carry the agent's identity and counters, and still tell an agent that runs but cannot
reach the controller (a Ready pod whose heartbeats stopped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

CRASH_LOOP = "CrashLoopBackOff"


class Liveness(StrEnum):
    REPORTING = "reporting"
    SILENT = "silent"
    CRASH_LOOPING = "crash-looping"
    NOT_DEPLOYED = "not-deployed"


@dataclass(frozen=True)
class AgentPod:
    """The agent's pod on a node as the kubelet reports it: `since` is when its Ready
    condition last changed; `waiting` the agent container's `state.waiting.reason`;
    `last_exit` its `lastState.terminated` (reason and exit code)."""

    name: str  # namespace/name
    ready: bool
    since: datetime | None
    restarts: int
    waiting: str = ""
    last_exit: str = ""
    terminating: bool = False


@dataclass(frozen=True)
class PodGone:
    """The node's agent pod was deleted at `at` and no other has taken its place."""

    name: str
    at: datetime


# What the pod watch knows of a node's agent: its pod, the pod it lost, or nothing (never one).
PodSight = AgentPod | PodGone | None


@dataclass(frozen=True)
class Verdict:
    """The liveness, and why in words: written only when read (a scrape or the overview judges
    10,000 agents and words a few)."""

    liveness: Liveness
    explain: Callable[[], str] = field(repr=False, compare=False)

    @property
    def reason(self) -> str:
        return self.explain()

    @property
    def alive(self) -> bool:
        return self.liveness is Liveness.REPORTING


@dataclass(frozen=True)
class Judge:
    """What every verdict of one reading shares (a request, a scrape): the time, the bounds
    and the pod view, taken once."""

    now: datetime
    silent_after: timedelta
    not_ready_after: timedelta
    sights: Mapping[str, PodSight] = field(default_factory=dict)
    watching: bool = False

    def verdict(self, node: str, seen_at: datetime | None) -> Verdict:
        return judge(
            self.sights.get(node),
            seen_at,
            self.now,
            silent_after=self.silent_after,
            not_ready_after=self.not_ready_after,
            watching=self.watching,
        )

    def nodes(self, heard: Iterable[str]) -> list[str]:
        """The agents to show: every node heard from, and every node with an agent pod (or
        one that lost it) though it never sent a heartbeat: one crash-looping from its start."""
        found = set(heard)
        if self.watching:
            found.update(self.sights)
        return sorted(found)


def judge(
    sight: PodSight,
    seen_at: datetime | None,
    now: datetime,
    *,
    silent_after: timedelta,
    not_ready_after: timedelta,
    watching: bool,
) -> Verdict:
    """The agent's liveness and why. `seen_at`: its last heartbeat (None: never); `watching`:
    whether the pod view can be trusted (synced and seeing); without it only heartbeats count."""
    if not watching:
        return _by_heartbeat(seen_at, now, silent_after, _nothing)
    if sight is None:
        verdict = _by_heartbeat(seen_at, now, silent_after, lambda: "; no agent pod on this node")
        if verdict.alive:
            return verdict
        return Verdict(
            Liveness.NOT_DEPLOYED, lambda: f"no agent pod on this node, and {verdict.reason}"
        )
    if isinstance(sight, PodGone):
        gone = sight
        gone_for = now - gone.at
        if gone_for > not_ready_after:
            return Verdict(
                Liveness.NOT_DEPLOYED,
                lambda: (
                    f"agent pod {gone.name} deleted {_seconds(gone_for)} s ago and not "
                    "replaced: the DaemonSet no longer runs on this node"
                ),
            )
        return _by_heartbeat(
            seen_at,
            now,
            silent_after,
            lambda: (
                f"; agent pod {gone.name} deleted {_seconds(gone_for)} s ago, awaiting its "
                "replacement"
            ),
        )
    pod = sight
    if pod.waiting == CRASH_LOOP:
        last = f" (last exit: {pod.last_exit})" if pod.last_exit else ""
        return Verdict(
            Liveness.CRASH_LOOPING,
            lambda: f"agent pod {pod.name}: {CRASH_LOOP} after {pod.restarts} restarts{last}",
        )
    changed_for = now - pod.since if pod.since is not None else timedelta(0)
    if not pod.ready:

        def not_ready() -> str:
            how = pod.waiting or ("terminating" if pod.terminating else "running, not ready")
            return f"agent pod {pod.name} not Ready for {_seconds(changed_for)} s ({how})"

        if pod.since is None or changed_for > not_ready_after:
            return Verdict(Liveness.SILENT, not_ready)
        return _by_heartbeat(seen_at, now, silent_after, lambda: f"; {not_ready()}")

    def ready() -> str:
        restarts = f" ({pod.restarts} restarts)" if pod.restarts else ""
        return f"agent pod {pod.name} Ready{restarts}"

    if seen_at is None:
        if changed_for > silent_after:
            return Verdict(
                Liveness.SILENT,
                lambda: f"{ready()} for {_seconds(changed_for)} s, but never sent a heartbeat",
            )
        return Verdict(Liveness.REPORTING, lambda: f"{ready()}; no heartbeat yet")
    age = now - seen_at
    if age > silent_after:
        return Verdict(
            Liveness.SILENT,
            lambda: (
                f"{ready()}, but no heartbeat for {_seconds(age)} s (bound "
                f"{_seconds(silent_after)} s): it cannot reach the controller"
            ),
        )
    return Verdict(Liveness.REPORTING, lambda: f"{ready()}; heartbeat {_seconds(age)} s ago")


def _by_heartbeat(
    seen_at: datetime | None, now: datetime, silent_after: timedelta, note: Callable[[], str]
) -> Verdict:
    if seen_at is None:
        return Verdict(Liveness.SILENT, lambda: f"no heartbeat ever{note()}")
    age = now - seen_at
    if age > silent_after:
        return Verdict(
            Liveness.SILENT,
            lambda: f"no heartbeat for {_seconds(age)} s (bound {_seconds(silent_after)} s)",
        )
    return Verdict(Liveness.REPORTING, lambda: f"heartbeat {_seconds(age)} s ago{note()}")


def _nothing() -> str:
    return ""


def _seconds(span: timedelta) -> int:
    return max(0, round(span.total_seconds()))
