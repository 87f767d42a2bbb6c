"""Opt-outs: a named person's request that the remediation leave a node, a pod's node or a
Slurm job's node alone until a set time, for a stated reason (issue #27).

Pure values and decisions only: which opt-outs hold a node now, which have expired, when a hold
has lasted long enough to page on-call, how a pod's label (the older, ownerless opt-out) is
described. The store keeps the records, the remediation asks these functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

# Node and pod names in a lenient DNS-1123 subdomain shape (a name that matches nothing only
# protects nothing), namespaces as DNS-1123 labels; the API's schema states the same patterns.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Slurm job ids: a plain job, an array task (`123_4`) or a heterogeneous component (`123+1`).
_SLURM_JOB = re.compile(r"[0-9]{1,10}([_+][0-9]{1,10})?")
REASON_MAX = 500
DEFAULT_MAX_OPT_OUT = timedelta(days=7)
DEFAULT_MAX_HOLD = timedelta(hours=24)


class OptOutRefused(ValueError):
    """The request is refused as it stands; the message says why (nothing was written)."""


class Scope(StrEnum):
    NODE = "node"
    POD = "pod"
    SLURM_JOB = "slurm_job"


@dataclass(frozen=True)
class Target:
    scope: Scope
    name: str  # node name, NAMESPACE/POD, or Slurm job id

    def __str__(self) -> str:
        return f"{self.scope.value.replace('_', ' ')} {self.name}"


def parse_target(node: str | None, pod: str | None, slurm_job: str | None) -> Target:
    """Exactly one of the three, well formed; OptOutRefused names what is wrong."""
    given = ((Scope.NODE, node), (Scope.POD, pod), (Scope.SLURM_JOB, slurm_job))
    chosen = [(s, v.strip()) for s, v in given if v is not None and v.strip()]
    if len(chosen) != 1:
        raise OptOutRefused(
            "name exactly one target: a node, a pod (NAMESPACE/NAME) or a Slurm job"
        )
    scope, value = chosen[0]
    if scope is Scope.NODE and not (len(value) <= 253 and _SUBDOMAIN.fullmatch(value)):
        raise OptOutRefused(f"node {value!r} is not a Kubernetes node name (DNS-1123 subdomain)")
    if scope is Scope.POD:
        namespace, _, name = value.partition("/")
        if not (
            len(namespace) <= 63
            and _LABEL.fullmatch(namespace)
            and len(name) <= 253
            and _SUBDOMAIN.fullmatch(name)
        ):
            raise OptOutRefused(f"pod {value!r} is not NAMESPACE/NAME with Kubernetes names")
    if scope is Scope.SLURM_JOB and not _SLURM_JOB.fullmatch(value):
        raise OptOutRefused(f"Slurm job {value!r} is not a job id (123, 123_4 or 123+1)")
    return Target(scope, value)


def check_request(reason: str | None, since: datetime, until: datetime, longest: timedelta) -> str:
    """The reason, trimmed, when the request may be recorded; OptOutRefused otherwise."""
    text = (reason or "").strip(" ")
    if not text:
        raise OptOutRefused("a reason is required: say who relies on the node and why")
    if len(text) > REASON_MAX:
        raise OptOutRefused(f"the reason is {len(text)} characters; at most {REASON_MAX}")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise OptOutRefused("the reason must be one line of printable text")
    if until <= since:
        raise OptOutRefused(f"the expiry {until.isoformat()} is not in the future")
    if until - since > longest:
        raise OptOutRefused(
            f"an opt-out may last at most {span(longest)} (max_opt_out); "
            f"{span(until - since)} asked"
        )
    return text


@dataclass(frozen=True)
class OptOutRecord:
    id: int
    cluster: str
    scope: Scope
    target: str
    actor: str
    reason: str
    since: datetime
    until: datetime
    removed_at: datetime | None = None
    removed_by: str | None = None
    expired_noted_at: datetime | None = None

    def state(self, now: datetime) -> Literal["active", "expired", "removed"]:
        if self.removed_at is not None:
            return "removed"
        return "active" if now < self.until else "expired"

    def describe(self) -> str:
        return (
            f"opt-out #{self.id} on {Target(self.scope, self.target)} by {self.actor} "
            f"until {self.until.isoformat(timespec='seconds')}: {self.reason}"
        )


@dataclass(frozen=True)
class Holding:
    """The recorded opt-outs that concern one node now: those that still protect it, and those
    that ran out and no longer do (which the timeline says once)."""

    active: tuple[OptOutRecord, ...]
    expired: tuple[OptOutRecord, ...]


def holding(
    records: Iterable[OptOutRecord],
    now: datetime,
    *,
    node: str | None,
    pods: Iterable[str] = (),
    jobs: Iterable[str] = (),
) -> Holding:
    """Which records concern `node` (itself, when given; a pod or Slurm job on it) and whether
    each still protects it. Removed records concern nobody."""
    wanted = {(Scope.NODE, node)} if node else set()
    wanted |= {(Scope.POD, p) for p in pods}
    wanted |= {(Scope.SLURM_JOB, j) for j in jobs}
    mine = [r for r in records if r.removed_at is None and (r.scope, r.target) in wanted]
    return Holding(
        tuple(r for r in mine if now < r.until), tuple(r for r in mine if now >= r.until)
    )


def escalation_due(
    held_since: datetime, now: datetime, max_hold: timedelta, escalated: bool
) -> bool:
    """Page on-call once, when a faulty node has been held by opt-outs longer than allowed."""
    return not escalated and now - held_since > max_hold


@dataclass(frozen=True)
class LabelHold:
    """A pod's opt-out label: no owner and no expiry; its set time is the managedFields entry
    that owns the label when the API server kept one, else the pod's creation."""

    pod: str
    since: datetime | None
    source: Literal["managedFields", "creation time", "unknown"]

    def describe(self) -> str:
        """Stable words (no age) for a hold reason, which is rewritten only when it changes."""
        if self.since is None:
            return f"{self.pod}: label, no expiry, set time unknown"
        return (
            f"{self.pod}: label, no expiry, set since "
            f"{self.since.isoformat(timespec='seconds')} (from the pod's {self.source})"
        )

    def age(self, now: datetime) -> str | None:
        return None if self.since is None else span(max(timedelta(0), now - self.since))


def label_hold(pod: str, label_set_at: datetime | None, created_at: datetime | None) -> LabelHold:
    if label_set_at is not None:
        return LabelHold(pod, label_set_at, "managedFields")
    if created_at is not None:
        return LabelHold(pod, created_at, "creation time")
    return LabelHold(pod, None, "unknown")


def span(value: timedelta) -> str:
    """A rounded length of time for people: 6d2h, 3h5m, 42s."""
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"
