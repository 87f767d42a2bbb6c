"""Fleet reliability figures from the hardware ledger: failures per GPU-year by GPU model,
driver, VBIOS, pool and cluster, the mean time between failures, and the top offenders.

A failure is a remediation linked to a GPU (the ledger's remediation links): a fault that took a
node out of service, not every reading of it. Exposure is the time each GPU sat in a node
(its placements), clipped to the window. `figures` is pure; `read` is the one query."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from remediator.store.db import session_scope
from remediator.store.models import LedgerGpu, LedgerLink, LedgerPlacement, Remediation

YEAR_SECONDS = 365.25 * 86400
DIMENSIONS = ("model", "driver", "vbios", "pool", "cluster")
UNKNOWN = "unknown"
TOP = 10


@dataclass(frozen=True)
class Exposure:
    """One placement of one GPU, with what the figures group it by."""

    gpu: str
    machine: str | None
    model: str
    driver: str
    vbios: str
    pool: str
    cluster: str
    node: str
    from_at: datetime
    to_at: datetime | None


@dataclass(frozen=True)
class Failure:
    gpu: str | None
    machine: str | None
    cluster: str
    node: str
    at: datetime


@dataclass(frozen=True)
class Row:
    key: str
    gpus: int
    gpu_years: float
    failures: int

    @property
    def per_gpu_year(self) -> float | None:
        return self.failures / self.gpu_years if self.gpu_years > 0 else None

    @property
    def mtbf_hours(self) -> float | None:
        """GPU-hours per failure: the mean time between failures of one GPU of the group."""
        return self.gpu_years * YEAR_SECONDS / 3600 / self.failures if self.failures else None


@dataclass(frozen=True)
class Offender:
    id: str
    failures: int
    last_at: datetime


@dataclass(frozen=True)
class Figures:
    since: datetime
    until: datetime
    overall: Row
    by: Mapping[str, tuple[Row, ...]]
    top_gpus: tuple[Offender, ...]
    top_machines: tuple[Offender, ...]


def _overlap(e: Exposure, since: datetime, until: datetime) -> float:
    start = max(e.from_at, since)
    end = min(e.to_at or until, until)
    return max(0.0, (end - start).total_seconds())


def _placed(exposures: Sequence[Exposure], failure: Failure) -> Exposure | None:
    """The GPU's placement at the time of the failure (`exposures` are that GPU's)."""
    for e in exposures:
        if e.from_at <= failure.at and (e.to_at is None or failure.at < e.to_at):
            return e
    return None


def figures(
    exposures: Sequence[Exposure],
    failures: Sequence[Failure],
    *,
    since: datetime,
    until: datetime,
) -> Figures:
    by_gpu: dict[str, list[Exposure]] = defaultdict(list)
    for e in exposures:
        by_gpu[e.gpu].append(e)
    seconds: dict[str, dict[str, float]] = {d: defaultdict(float) for d in DIMENSIONS}
    members: dict[str, dict[str, set[str]]] = {d: defaultdict(set) for d in DIMENSIONS}
    failed: dict[str, dict[str, int]] = {d: defaultdict(int) for d in DIMENSIONS}
    total = 0.0
    for e in exposures:
        span = _overlap(e, since, until)
        if span <= 0:
            continue
        total += span
        for d in DIMENSIONS:
            key = getattr(e, d)
            seconds[d][key] += span
            members[d][key].add(e.gpu)
    counted = [f for f in failures if since <= f.at < until]
    gpus: dict[str, list[datetime]] = defaultdict(list)
    machines: dict[str, list[datetime]] = defaultdict(list)
    for f in counted:
        if f.gpu is not None:
            gpus[f.gpu].append(f.at)
        if f.machine is not None:
            machines[f.machine].append(f.at)
        where = _placed(by_gpu.get(f.gpu or "", []), f)
        for d in DIMENSIONS:
            key = (
                getattr(where, d)
                if where is not None
                else (f.cluster if d == "cluster" else UNKNOWN)
            )
            failed[d][key] += 1
    by = {
        d: tuple(
            sorted(
                (
                    Row(
                        k,
                        len(members[d].get(k, ())),
                        seconds[d].get(k, 0.0) / YEAR_SECONDS,
                        failed[d].get(k, 0),
                    )
                    for k in set(seconds[d]) | set(failed[d])
                ),
                key=lambda r: (-(r.per_gpu_year or 0.0), -r.failures, r.key),
            )
        )
        for d in DIMENSIONS
    }
    overall = Row("fleet", len(by_gpu), total / YEAR_SECONDS, len(counted))
    return Figures(since, until, overall, by, _top(gpus), _top(machines))


def _top(found: Mapping[str, list[datetime]]) -> tuple[Offender, ...]:
    ranked = sorted(found.items(), key=lambda kv: (-len(kv[1]), -max(kv[1]).timestamp(), kv[0]))
    return tuple(Offender(k, len(v), max(v)) for k, v in ranked[:TOP])


def read(
    factory: sessionmaker[Session],
    *,
    since: datetime,
    clusters: Collection[str] | None = None,
) -> tuple[list[Exposure], list[Failure]]:
    """The placements overlapping the window (with the GPU's model, driver, VBIOS and the
    node's pool as its remediations name it) and the remediation links in it."""
    placements = (
        select(LedgerPlacement, LedgerGpu.model, LedgerGpu.driver, LedgerGpu.vbios)
        .join(LedgerGpu, LedgerGpu.uuid == LedgerPlacement.gpu_uuid)
        .where((LedgerPlacement.to_at.is_(None)) | (LedgerPlacement.to_at > since))
    )
    links = select(LedgerLink).where(LedgerLink.subject == "remediation", LedgerLink.at >= since)
    pools = select(Remediation.cluster, Remediation.node, Remediation.pool).where(
        Remediation.pool.is_not(None)
    )
    if clusters is not None:
        placements = placements.where(LedgerPlacement.cluster.in_(sorted(clusters)))
        links = links.where(LedgerLink.cluster.in_(sorted(clusters)))
        pools = pools.where(Remediation.cluster.in_(sorted(clusters)))
    with session_scope(factory) as session:
        pool_of = {(c, n): p for c, n, p in session.execute(pools) if p}
        exposures = [
            Exposure(
                gpu=p.gpu_uuid,
                machine=p.machine_id,
                model=model or UNKNOWN,
                driver=driver or UNKNOWN,
                vbios=vbios or UNKNOWN,
                pool=pool_of.get((p.cluster, p.node), UNKNOWN),
                cluster=p.cluster,
                node=p.node,
                from_at=p.from_at,
                to_at=p.to_at,
            )
            for p, model, driver, vbios in session.execute(placements)
        ]
        failures = [
            Failure(link.gpu_uuid, link.machine_id, link.cluster, link.node, link.at)
            for link in session.scalars(links)
        ]
    return exposures, failures


def window(now: datetime, days: int) -> tuple[datetime, datetime]:
    return now - timedelta(days=days), now
