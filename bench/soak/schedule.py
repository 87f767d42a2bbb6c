"""The soak's fault catalog and its seeded schedule.

Drawing is pure: `draw(seed, minutes, kinds)` returns the same schedule for the same arguments,
every random choice made here (which kind, when, which GPU, how long, how to pick a node from
the fleet as it stands then). What the fleet looks like at the moment a fault fires is not
known in advance, so a node is drawn as a fraction (`pick`) of the fitting nodes, sorted by name.
The digest lets two runs be compared by one line.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# Kinds that plant a fault on a node (each ends in a signal the checker follows, I6).
SIGNAL_KINDS = ("xid", "nvlink", "doa", "opt_out", "provider_fail", "provider_api")
# Kinds that break what the controller stands on, or undo its work from outside.
ENV_KINDS = (
    "kube_api",
    "db_outage",
    "controller_kill",
    "empty_db_controller",
    "human_uncordon",
    "slurmctld_clean",
    "pause",
    "operator",
)
KINDS = SIGNAL_KINDS + ENV_KINDS
DESCRIPTIONS = {
    "xid": "XID 79 (for good), 48 or 95 on a GPU of a healthy node",
    "nvlink": "NVLink error bursts on three GPUs of a healthy node",
    "doa": "the pool's next 1-2 new machines arrive dead (XID 79, slow NVLink or a GPU "
    "missing), then an XID 79 in that pool",
    "opt_out": "a node opt-out through the console API, expiring in 45-90 s, then an XID 79 there",
    "provider_fail": "the cloud fails the next replacement operation, then an XID 79",
    "provider_api": "the node-pool API answers replacement requests 503, 429, late, or loses "
    "the answer after acting, then an XID 79",
    "kube_api": "the Kubernetes API fails the controllers' requests (503, 429, 500, reset, "
    "delay, watches gone) for 5-15 s",
    "db_outage": "PostgreSQL stopped (pg_ctl -m fast) for 6-15 s, then started",
    "controller_kill": "SIGKILL the leader or the standby, started again 2-8 s later",
    "empty_db_controller": "a third controller on a new empty database for 20-35 s, then stopped",
    "human_uncordon": "kubectl uncordon and the quarantine taint removed on a fenced node",
    "slurmctld_clean": "slurmctld restarted with -c (its drains and jobs wiped)",
    "pause": "automation paused through the console API for 8-20 s, then resumed",
    "operator": "on-call cancels a held or failed remediation and releases the machines that "
    "failed validation in it (console API), which frees their budget",
}
# Asked for by name but not injectable in this setup: why.
UNAVAILABLE = {
    "sxid": "needs `sim serve --topology nvl72` (GB200 racks, one pool); the soak's fleet is the "
    "two-pool H100/A100 cluster its Slurm layout, policies and budgets are written for",
    "rack_power": "needs `sim serve --topology nvl72`, as sxid",
    "maintenance": "the simulator announces cloud maintenance only with `--cloud aws` or `gce`; "
    "the soak runs the node-pool HTTP provider, whose operations list I4 and I8 read",
}
NEEDS_POSTGRESQL = frozenset({"db_outage"})

FIRST_AT = 5.0  # seconds into the soak: the first fault
GAP = (5.0, 10.0)  # seconds between two faults: ~230 in 30 minutes, some find no node to hit
SETTLE = 45.0  # seconds at the end with no new fault: the last ones play out under the checker
XID_CODES = (79, 48, 95)
GPUS = 8


class UsageError(ValueError):
    """A --faults list the soak cannot run; the message says why and names what it can."""


@dataclass(frozen=True)
class Planned:
    """One fault: `at` seconds after the soak started, its kind, and its drawn parameters."""

    at: float
    kind: str
    params: dict[str, Any]

    def line(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.at:7.1f}s  {self.kind:<20} {shown}"


def available_kinds(db: str) -> tuple[str, ...]:
    return tuple(k for k in KINDS if db == "postgresql" or k not in NEEDS_POSTGRESQL)


def parse_kinds(text: str | None, db: str) -> tuple[str, ...]:
    """The kinds named (in catalog order, so that the order typed changes nothing), or every
    kind this database allows."""
    usable = available_kinds(db)
    if text is None:
        return usable
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"--faults names no kind; known kinds: {', '.join(KINDS)}")
    for name in names:
        if name in UNAVAILABLE:
            raise UsageError(f"fault kind {name!r} cannot be injected here: {UNAVAILABLE[name]}")
        if name not in KINDS:
            raise UsageError(f"unknown fault kind {name!r}; known kinds: {', '.join(KINDS)}")
        if name not in usable:
            raise UsageError(f"fault kind {name!r} needs --db postgresql")
    return tuple(k for k in KINDS if k in names)


def fault_window(minutes: float) -> float:
    """Faults start in [FIRST_AT, this); the rest of the soak lets them play out."""
    return max(FIRST_AT + 1.0, minutes * 60.0 - SETTLE)


def _params(kind: str, rng: random.Random) -> dict[str, Any]:
    pick = round(rng.random(), 4)
    gpu = rng.randrange(GPUS)
    if kind == "xid":
        code = rng.choice(XID_CODES)
        # XID 79 is a GPU off the bus for good; 48 and 95 may clear with a GPU reset.
        persistent = True if code == 79 else rng.random() < 0.5
        return {"pick": pick, "gpu": gpu, "code": code, "persistent": persistent}
    if kind == "nvlink":
        gpus = sorted(rng.sample(range(GPUS), 3))
        return {"pick": pick, "gpus": gpus, "counts": [rng.randrange(50, 500) for _ in gpus]}
    if kind == "doa":
        arrival = rng.choice(
            (
                {"type": "xid", "gpu": rng.randrange(GPUS), "code": 79},
                {"type": "nvlink_slow", "fraction": 0.5},
                {"type": "gpu_missing", "gpu": rng.randrange(GPUS)},
            )
        )
        return {"pick": pick, "gpu": gpu, "arrival": arrival, "count": rng.choice((1, 2))}
    if kind == "opt_out":
        return {"pick": pick, "gpu": gpu, "until_seconds": rng.randrange(45, 91)}
    if kind == "provider_fail":
        return {"pick": pick, "gpu": gpu}
    if kind == "provider_api":
        rule = rng.choice(
            (
                {"type": "error", "status": 503, "count": 2, "method": "POST"},
                {
                    "type": "error",
                    "status": 500,
                    "count": 1,
                    "method": "POST",
                    "after_processing": True,
                },
                {"type": "throttle", "count": 3, "retry_after": 1, "method": "POST"},
                {"type": "delay", "seconds": 3.0, "count": 2, "method": "POST"},
            )
        )
        return {"pick": pick, "gpu": gpu, "rule": rule}
    if kind == "kube_api":
        rules: tuple[dict[str, Any], ...] = (
            {"type": "error", "status": 503},
            {"type": "error", "status": 500},
            {"type": "error", "status": 429, "retry_after": 1},
            {"type": "reset"},
            {"type": "delay", "seconds": 1.5},
            {"type": "watch_gone"},
        )
        return {"rule": rng.choice(rules), "seconds": rng.randrange(5, 16)}
    if kind == "db_outage":
        return {"seconds": rng.randrange(6, 16)}
    if kind == "controller_kill":
        return {"which": rng.choice(("leader", "standby")), "down_seconds": rng.randrange(2, 9)}
    if kind == "empty_db_controller":
        return {"seconds": rng.randrange(20, 36)}
    if kind == "human_uncordon":
        return {"pick": pick}
    if kind == "slurmctld_clean":
        return {}
    if kind == "pause":
        return {"seconds": rng.randrange(8, 21)}
    if kind == "operator":
        return {"pick": pick}
    raise ValueError(f"no parameters for kind {kind!r}")


def draw(seed: int, minutes: float, kinds: Sequence[str]) -> tuple[Planned, ...]:
    """The schedule. The first round fires every kind once in a seeded order (an XID first, so
    that the environment faults after it find something fenced to act on); after that each
    fault's kind is drawn at random."""
    if not kinds:
        raise UsageError("no fault kinds to draw from")
    rng = random.Random(seed)
    rest = [k for k in kinds if k != "xid"]
    first = (["xid"] if "xid" in kinds else []) + rng.sample(rest, len(rest))
    window = fault_window(minutes)
    planned: list[Planned] = []
    at = FIRST_AT
    while at < window:
        index = len(planned)
        kind = first[index] if index < len(first) else rng.choice(list(kinds))
        planned.append(Planned(round(at, 1), kind, _params(kind, rng)))
        at += rng.uniform(*GAP)
    return tuple(planned)


def digest(schedule: Sequence[Planned]) -> str:
    """A short hash of the schedule: equal for two runs that will inject the same faults."""
    text = json.dumps([asdict(p) for p in schedule], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
