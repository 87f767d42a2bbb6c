"""Graceful pod deletion as the API server decides it (the pod strategy's CheckGracefulDelete and
the registry's BeforeDelete): which grace period applies, when a pod goes at once, and how a
second DELETE may only shorten a deletion already under way. Pure: the cluster carries it out."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from remediator.sim.kube.api.kobj import grace_seconds, is_terminal, parse_time, rfc3339
from remediator.sim.kube.api.store import Obj


class Action(Enum):
    KEEP = "keep"  # already terminating with this or a shorter grace: nothing changes
    REMOVE = "remove"  # delete from the store now
    MARK = "mark"  # set deletionTimestamp and deletionGracePeriodSeconds


@dataclass(frozen=True)
class Deletion:
    action: Action
    timestamp: str = ""
    grace: int = 0


def plan_deletion(pod: Obj, grace: int | None, now: datetime) -> Deletion:
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        current = meta.get("deletionGracePeriodSeconds")
        if current is None:
            return Deletion(Action.REMOVE)
        if grace is None or grace >= int(current):
            return Deletion(Action.KEEP)
        if grace <= 0:
            return Deletion(Action.REMOVE)
        requested = parse_time(meta["deletionTimestamp"]) - timedelta(seconds=int(current))
        return Deletion(Action.MARK, rfc3339(requested + timedelta(seconds=grace)), grace)
    period = grace_seconds(pod) if grace is None else grace
    if not pod.get("spec", {}).get("nodeName") or is_terminal(pod):
        period = 0  # no kubelet has to stop anything
    elif period < 0:
        period = 1
    if period == 0:
        return Deletion(Action.REMOVE)
    return Deletion(Action.MARK, rfc3339(now + timedelta(seconds=period)), period)
