"""Fleet reliability figures from the hardware ledger: failures per GPU-year by GPU model,
driver, VBIOS, pool and cluster, the mean time between failures, and the top offenders.

The denominator is every GPU's time in service, not only the GPUs that failed: a GPU the
ledger placed (agent heartbeats, DCGM labels, validation inventories, a fault) counts from the
time its machine entered service under that node when it is the first GPU the ledger met in its
slot (a GPU first met at its fault was there all along), and a live node's GPUs the ledger never
met count from its machine's first sighting, under the node's GPU model label. A failure is one
fault episode of one GPU (or, for a fault naming none, of its machine): the remediation links
of the same hardware less than `EPISODE_GAP` apart are one episode. Below `MIN_GPU_YEARS` of
exposure a group has no rate: too little data. `figures` and the builders are pure; `read` is
the one query."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from remediator.ledger.store import PLACED, REPLACEMENT
from remediator.model.gpus import model_key
from remediator.store.db import session_scope
from remediator.store.models import LedgerGpu, LedgerLink, LedgerPlacement, Remediation

YEAR_SECONDS = 365.25 * 86400
DIMENSIONS = ("model", "driver", "vbios", "pool", "cluster")
UNKNOWN = "unknown"
TOP = 10
# Below this much GPU time a rate says more about the window than the hardware (one fault in a
# young fleet's first hour reads as thousands per GPU-year): 8 GPUs for 46 days, 1,000 for 9 h.
MIN_GPU_YEARS = 1.0
# Remediation links of one GPU closer than this are one fault (a retry, a reopened remediation,
# a rack's and a tray's remediation of the same fault).
EPISODE_GAP = timedelta(hours=1)


@dataclass(frozen=True)
class Exposure:
    """One span of GPU time, with what the figures group it by: one placed GPU, or `count`
    GPUs of a live node the ledger never met one by one (`gpu` then names the node)."""

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
    slot: str | None = None  # the PCI address or index the GPU sat at
    count: int = 1


@dataclass(frozen=True)
class Failure:
    gpu: str | None
    machine: str | None
    cluster: str
    node: str
    at: datetime
    remediation: int | None = None


@dataclass(frozen=True)
class MachineSpan:
    """A machine in service under a node name, from the ledger's `placed` links until another
    machine took the name, it moved, or a replacement took it out (None: still there)."""

    machine: str
    cluster: str
    node: str
    from_at: datetime
    to_at: datetime | None


@dataclass(frozen=True)
class Sighting:
    machine: str
    cluster: str
    node: str
    at: datetime


@dataclass(frozen=True)
class LiveNode:
    """A node the cluster has now, as its labels and capacity describe its GPUs."""

    cluster: str
    node: str
    machine: str | None
    gpus: int | None
    model: str | None
    driver: str | None
    pool: str
    created_at: datetime | None


@dataclass(frozen=True)
class Row:
    key: str
    gpus: int
    gpu_years: float
    failures: int

    @property
    def enough_data(self) -> bool:
        return self.gpu_years >= MIN_GPU_YEARS

    @property
    def per_gpu_year(self) -> float | None:
        return self.failures / self.gpu_years if self.enough_data else None

    @property
    def mtbf_hours(self) -> float | None:
        """GPU-hours per failure: the mean time between failures of one GPU of the group."""
        if not self.enough_data or not self.failures:
            return None
        return self.gpu_years * YEAR_SECONDS / 3600 / self.failures


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


def machine_spans(placed: Sequence[Sighting], replaced: Sequence[Sighting]) -> list[MachineSpan]:
    """Each machine's spans under node names, from its `placed` sightings (a machine under a
    name it was not under before) and its replacements, in time order."""
    spans: list[MachineSpan] = []
    by_node: dict[tuple[str, str], tuple[str, datetime]] = {}
    by_machine: dict[str, tuple[str, str]] = {}

    def close(where: tuple[str, str], at: datetime) -> None:
        found = by_node.pop(where, None)
        if found is not None:
            spans.append(MachineSpan(found[0], where[0], where[1], found[1], at))
            by_machine.pop(found[0], None)

    tagged = [(s.at, 0, s) for s in placed] + [(s.at, 1, s) for s in replaced]
    for at, is_replacement, s in sorted(tagged, key=lambda t: (t[0], t[1])):
        if is_replacement:
            if (where := by_machine.get(s.machine)) is not None:
                close(where, at)
            continue
        here = (s.cluster, s.node)
        current = by_node.get(here)
        if current is not None and current[0] == s.machine:
            continue
        close(here, at)
        if (was := by_machine.get(s.machine)) is not None:
            close(was, at)
        by_node[here] = (s.machine, at)
        by_machine[s.machine] = here
    spans.extend(MachineSpan(m, c, n, at, None) for (c, n), (m, at) in by_node.items())
    return spans


Spans = Mapping[tuple[str, str], Sequence[MachineSpan]]


def _by_node(spans: Sequence[MachineSpan]) -> dict[tuple[str, str], list[MachineSpan]]:
    found: dict[tuple[str, str], list[MachineSpan]] = defaultdict(list)
    for s in spans:
        found[(s.cluster, s.node)].append(s)
    return found


def _span_at(spans: Spans, cluster: str, node: str, at: datetime) -> MachineSpan:
    """The machine span under the node at `at` (one starting then when none is known)."""
    return next(
        (
            s
            for s in spans.get((cluster, node), ())
            if s.from_at <= at and (s.to_at is None or at < s.to_at)
        ),
        MachineSpan("", cluster, node, at, None),
    )


def in_service(
    placements: Sequence[Exposure],
    spans: Sequence[MachineSpan],
    live: Sequence[LiveNode],
) -> list[Exposure]:
    """Every GPU's time in service: each placement (the first GPU met in its slot from when its
    machine was under the node; its model from the node's label when nothing reported one),
    and each live node's GPUs the ledger never met, from its machine's first sighting."""
    under = _by_node(spans)
    first_in_slot: dict[tuple[str, str, str, datetime], datetime] = {}
    for e in placements:
        if e.slot is not None:
            span = _span_at(under, e.cluster, e.node, e.from_at)
            key = (e.cluster, e.node, e.slot, span.from_at)
            first_in_slot[key] = min(first_in_slot.get(key, e.from_at), e.from_at)
    nodes = {(n.cluster, n.node): n for n in live}
    out: list[Exposure] = []
    for e in placements:
        span = _span_at(under, e.cluster, e.node, e.from_at)
        if e.slot is not None and first_in_slot[(e.cluster, e.node, e.slot, span.from_at)] == (
            e.from_at
        ):
            e = replace(e, from_at=span.from_at)
        here = nodes.get((e.cluster, e.node))
        if here is not None and e.to_at is None:
            e = replace(
                e,
                model=e.model if e.model != UNKNOWN else here.model or UNKNOWN,
                driver=e.driver if e.driver != UNKNOWN else here.driver or UNKNOWN,
                pool=e.pool if e.pool != UNKNOWN else here.pool or UNKNOWN,
            )
        out.append(e)
    met: dict[tuple[str, str], int] = defaultdict(int)
    for e in placements:
        if e.to_at is None:
            met[(e.cluster, e.node)] += 1
    for n in live:
        rest = (n.gpus or 0) - met[(n.cluster, n.node)]
        current = [
            s
            for s in under.get((n.cluster, n.node), ())
            if s.to_at is None and (n.machine is None or s.machine == n.machine)
        ]
        start = current[0].from_at if current else n.created_at
        if rest <= 0 or start is None:
            continue
        out.append(
            Exposure(
                gpu=f"{n.cluster}/{n.node}",
                machine=n.machine,
                model=n.model or UNKNOWN,
                driver=n.driver or UNKNOWN,
                vbios=UNKNOWN,
                pool=n.pool or UNKNOWN,
                cluster=n.cluster,
                node=n.node,
                from_at=start,
                to_at=None,
                count=rest,
            )
        )
    return _one_spelling(out)


def _one_spelling(exposures: Sequence[Exposure]) -> list[Exposure]:
    """One name per GPU model: nvidia-smi's ("NVIDIA H100 80GB HBM3") where anything reported
    it, else the node label's ("NVIDIA-H100-80GB-HBM3")."""
    names: dict[str, str] = {}
    for e in exposures:
        known = names.get(model_key(e.model))
        if known is None or (" " in e.model and " " not in known):
            names[model_key(e.model)] = e.model
    return [replace(e, model=names[model_key(e.model)]) for e in exposures]


def episodes(failures: Sequence[Failure]) -> list[Failure]:
    """The first link of each fault episode: links of one GPU (a machine, when they name no
    GPU; a node, when neither) less than EPISODE_GAP after the episode's last are the same."""
    last: dict[tuple[str, str], datetime] = {}
    kept: list[Failure] = []
    for f in sorted(failures, key=lambda f: f.at):
        unit = (
            ("gpu", f.gpu)
            if f.gpu is not None
            else ("machine", f.machine)
            if f.machine is not None
            else ("node", f"{f.cluster}/{f.node}")
        )
        before = last.get(unit)
        last[unit] = f.at
        if before is None or f.at - before >= EPISODE_GAP:
            kept.append(f)
    return kept


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
    """The figures over [since, until): `exposures` as `in_service` makes them, `failures` every
    remediation link (each episode counted once)."""
    by_gpu: dict[str, list[Exposure]] = defaultdict(list)
    for e in exposures:
        by_gpu[e.gpu].append(e)
    seconds: dict[str, dict[str, float]] = {d: defaultdict(float) for d in DIMENSIONS}
    members: dict[str, dict[str, dict[str, int]]] = {d: defaultdict(dict) for d in DIMENSIONS}
    fleet: dict[str, int] = {}
    total = 0.0
    for e in exposures:
        span = _overlap(e, since, until)
        if span <= 0:
            continue
        total += span * e.count
        fleet[e.gpu] = max(fleet.get(e.gpu, 0), e.count)
        for d in DIMENSIONS:
            key = getattr(e, d)
            seconds[d][key] += span * e.count
            group = members[d][key]
            group[e.gpu] = max(group.get(e.gpu, 0), e.count)
    failed: dict[str, dict[str, int]] = {d: defaultdict(int) for d in DIMENSIONS}
    counted = [f for f in episodes(failures) if since <= f.at < until]
    gpus: dict[str, list[datetime]] = defaultdict(list)
    machines: dict[str, list[datetime]] = defaultdict(list)
    for f in counted:
        if f.gpu is not None:
            gpus[f.gpu].append(f.at)
        if f.machine is not None:
            machines[f.machine].append(f.at)
        where = _placed(by_gpu.get(f.gpu or f"{f.cluster}/{f.node}", []), f)
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
                        sum(members[d].get(k, {}).values()),
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
    overall = Row("fleet", sum(fleet.values()), total / YEAR_SECONDS, len(counted))
    return Figures(since, until, overall, by, _top(gpus), _top(machines))


def _top(found: Mapping[str, list[datetime]]) -> tuple[Offender, ...]:
    ranked = sorted(found.items(), key=lambda kv: (-len(kv[1]), -max(kv[1]).timestamp(), kv[0]))
    return tuple(Offender(k, len(v), max(v)) for k, v in ranked[:TOP])


def read(
    factory: sessionmaker[Session],
    *,
    since: datetime,
    clusters: Collection[str] | None = None,
) -> tuple[list[Exposure], list[Failure], list[MachineSpan]]:
    """The placements overlapping the window (with the GPU's model, driver, VBIOS and the
    node's pool as its remediations name it), the remediation links in it, and every machine's
    spans under node names (its `placed` and `replaced` links)."""
    placements = (
        select(LedgerPlacement, LedgerGpu.model, LedgerGpu.driver, LedgerGpu.vbios)
        .join(LedgerGpu, LedgerGpu.uuid == LedgerPlacement.gpu_uuid)
        .where((LedgerPlacement.to_at.is_(None)) | (LedgerPlacement.to_at > since))
    )
    links = select(LedgerLink).where(LedgerLink.subject == "remediation", LedgerLink.at >= since)
    machines = select(
        LedgerLink.subject,
        LedgerLink.machine_id,
        LedgerLink.cluster,
        LedgerLink.node,
        LedgerLink.at,
    ).where(LedgerLink.subject.in_((PLACED, REPLACEMENT)), LedgerLink.machine_id.is_not(None))
    pools = select(Remediation.cluster, Remediation.node, Remediation.pool).where(
        Remediation.pool.is_not(None)
    )
    if clusters is not None:
        placements = placements.where(LedgerPlacement.cluster.in_(sorted(clusters)))
        links = links.where(LedgerLink.cluster.in_(sorted(clusters)))
        machines = machines.where(LedgerLink.cluster.in_(sorted(clusters)))
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
                slot=p.pci_bus_id or (None if p.gpu_index is None else str(p.gpu_index)),
            )
            for p, model, driver, vbios in session.execute(placements)
        ]
        failures = [
            Failure(link.gpu_uuid, link.machine_id, link.cluster, link.node, link.at, link.ref_id)
            for link in session.scalars(links)
        ]
        sightings: dict[str, list[Sighting]] = {PLACED: [], REPLACEMENT: []}
        for subject, machine, cluster, node, at in session.execute(machines):
            sightings[subject].append(Sighting(str(machine), cluster, node, at))
    return exposures, failures, machine_spans(sightings[PLACED], sightings[REPLACEMENT])


def window(now: datetime, days: int) -> tuple[datetime, datetime]:
    return now - timedelta(days=days), now
