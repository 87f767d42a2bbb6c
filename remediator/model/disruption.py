"""GPU-hours of workload disrupted: each pod a remediation evicted (or force-deleted), its GPUs
times the time from its eviction until a replacement runs.

The drain writes every evicted pod's GPUs and controlling owner on the timeline. When the
remediation ends, the engine makes one check over the evicted pods' namespaces: a replacement is
a newer pod (created at or after the eviction, another UID, not terminating) of the same
controller — for a Job or a training gang, the same Job — that is Running; its Ready time ends
the disruption. Several evicted pods of one owner are paired, in eviction order, with its
replacements in the order they came up. A pod with no owner has nothing to replace it; it, and
one whose replacement does not run yet when the remediation ends, count until the
remediation's end (until now while it is open or failed, or before the check was made).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from remediator.kube.objects import Pod, format_time, parse_time

# The round that evicted (or force-deleted) a pod says "evicted"; a pod first seen already
# terminating was deleted by someone else, not by this remediation.
_EVICTED = "evicted"


@dataclass(frozen=True)
class Eviction:
    pod: str  # namespace/name
    uid: str
    gpus: int
    owner_uid: str | None
    evicted_at: datetime
    rescheduled_at: datetime | None = None

    @property
    def namespace(self) -> str:
        return self.pod.split("/", 1)[0]

    def facts(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "gpus": self.gpus,
            "owner_uid": self.owner_uid,
            "evicted_at": format_time(self.evicted_at),
            "rescheduled_at": format_time(self.rescheduled_at) if self.rescheduled_at else None,
        }


def _eviction(entry: Mapping[str, Any]) -> Eviction | None:
    gpus, at = entry.get("gpus"), parse_time(entry.get("evicted_at") or entry.get("sigterm_at"))
    if not isinstance(gpus, int) or at is None or not entry.get("uid"):
        return None  # written before GPUs were recorded, or not evicted
    owner = entry.get("owner")
    owner_uid = entry.get("owner_uid") or (owner.get("uid") if isinstance(owner, dict) else None)
    return Eviction(
        pod=str(entry.get("pod", "")),
        uid=str(entry["uid"]),
        gpus=gpus,
        owner_uid=str(owner_uid) if owner_uid else None,
        evicted_at=at,
        rescheduled_at=parse_time(entry.get("rescheduled_at")),
    )


def evictions(details: Iterable[Mapping[str, Any] | None]) -> tuple[Eviction, ...]:
    """The evicted pods a remediation's timeline details name, in order: from the drain's
    per-pod progress (first sighting wins), superseded by the end-of-remediation check."""
    found: dict[str, Eviction] = {}
    checked: dict[str, Eviction] | None = None
    for detail in details:
        if not detail:
            continue
        if isinstance(detail.get("disrupted"), list):
            checked = {e.uid: e for x in detail["disrupted"] if (e := _eviction(x)) is not None}
        for entry in detail.get("pods") or ():
            if isinstance(entry, dict) and entry.get("state") == _EVICTED:
                eviction = _eviction(entry)
                if eviction is not None:
                    found.setdefault(eviction.uid, eviction)
    if checked is not None:
        found.update(checked)
    return tuple(found.values())


def rescheduled(evicted: Iterable[Eviction], pods: Iterable[Pod]) -> tuple[Eviction, ...]:
    """The evictions with `rescheduled_at` set where a replacement of the same owner runs."""
    evicted = tuple(evicted)
    gone = {e.uid for e in evicted}
    by_owner: dict[str, list[Eviction]] = {}
    for eviction in evicted:
        if eviction.owner_uid:
            by_owner.setdefault(eviction.owner_uid, []).append(eviction)
    found: dict[str, datetime] = {}
    pods = tuple(pods)
    for owner_uid, members in by_owner.items():
        members.sort(key=lambda e: e.evicted_at)
        first = members[0].evicted_at.replace(microsecond=0)  # the API's times are in seconds
        replacements = sorted(
            (
                p.running_since
                for p in pods
                if p.controller is not None
                and p.controller.uid == owner_uid
                and p.uid not in gone
                and not p.terminating  # e.g. the rest of a requeued gang, on its way out
                and p.running_since is not None
                and p.created_at is not None
                and p.created_at >= first
            ),
        )
        for eviction, running in zip(members, replacements, strict=False):
            found[eviction.uid] = max(running, eviction.evicted_at)
    return tuple(replace(e, rescheduled_at=found.get(e.uid, e.rescheduled_at)) for e in evicted)


def disrupted_gpu_hours(evicted: Iterable[Eviction], end: datetime) -> float:
    """GPUs times hours from each eviction until its replacement ran, or until `end` (the
    remediation's end, or now while it is open) for those none replaced."""
    total = 0.0
    for e in evicted:
        until = e.rescheduled_at or end
        total += e.gpus * max(0.0, (until - e.evicted_at).total_seconds()) / 3600
    return total
