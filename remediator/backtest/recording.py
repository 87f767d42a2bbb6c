"""What a backtest replays: the archived signals, cycles and node inventory of a time window,
with the remediations that really happened and the policy versions that were really active.
Read from the database, or from a `signals export` file so CI needs no production access."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from remediator.errors import RemediatorError
from remediator.model.states import State
from remediator.signals.model import SignalKind
from remediator.store.archive import (
    ArchivedRun,
    NodeChange,
    RunFilter,
    earliest_run,
    read_cycles,
    read_nodes,
    read_runs,
)
from remediator.store.db import session_scope
from remediator.store.models import ControllerState, PolicySet, Remediation, RemediationEvent

# Remediations this far before the window still shape it: cooldowns, repeats, open ones.
LOOKBACK = timedelta(days=30)
FORMAT_VERSION = 2  # 2: a header per cluster; runs carry each reading's observed timing
READABLE_VERSIONS = frozenset({1, 2})
DEFAULT_CLUSTER = "default"  # a version 1 file names no cluster


@dataclass(frozen=True, slots=True)
class RealRemediation:
    """A remediation as it happened; `ended_at` is when it stopped fencing its node (None: it
    still did at the end of the record)."""

    node: str
    policy: str
    pool: str | None
    created_at: datetime
    ended_at: datetime | None
    state: str
    ladder: tuple[str, ...]
    dry_run: bool
    # The machine its replacement brought: validated by this remediation, no scale-up.
    new_node: str | None = None
    # When a budget let it out of the queue (None: never queued, or a record older than this
    # field): its work took `ended_at - admitted_at`, the wait before is the budget's, not its.
    admitted_at: datetime | None = None

    @property
    def started_at(self) -> datetime:
        """When its work began: its admission, or its creation when it was never queued."""
        return self.admitted_at or self.created_at


@dataclass(frozen=True, slots=True)
class PolicyVersion:
    loaded_at: datetime
    content_hash: str
    files: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class BreakerRecord:
    tripped_at: datetime | None
    reset_at: datetime | None


@dataclass(frozen=True)
class Recording:
    since: datetime
    until: datetime
    cycles: Mapping[str, list[datetime]]
    runs: list[ArchivedRun]
    nodes: list[NodeChange]
    remediations: list[RealRemediation]
    policy_versions: list[PolicyVersion] = field(default_factory=list)
    breaker: BreakerRecord = BreakerRecord(None, None)
    cluster: str = DEFAULT_CLUSTER


class RecordingError(RemediatorError):
    """The record cannot be read: a bad file or an unreadable database."""


def from_database(
    factory: sessionmaker[Session],
    cluster: str,
    since: datetime,
    until: datetime,
    wanted: RunFilter | None = None,
) -> Recording:
    # A run begun before the window counts its readings from its first cycle.
    first = earliest_run(factory, cluster, since, until)
    return Recording(
        since=since,
        until=until,
        cycles=read_cycles(factory, cluster, min(since, first or since), until),
        runs=read_runs(factory, cluster, since, until, wanted),
        nodes=read_nodes(factory, cluster, since, until),
        remediations=_remediations(factory, cluster, since - LOOKBACK, until),
        policy_versions=policy_versions(factory, cluster, until),
        breaker=_breaker(factory, cluster),
        cluster=cluster,
    )


def _remediations(
    factory: sessionmaker[Session], cluster: str, since: datetime, until: datetime
) -> list[RealRemediation]:
    fencing = {State.FAILED.value} | {s.value for s in State if s.value not in _CLOSED}
    found: list[RealRemediation] = []
    with session_scope(factory) as session:
        rows = list(
            session.scalars(
                select(Remediation)
                .where(
                    Remediation.cluster == cluster,
                    Remediation.created_at >= since,
                    Remediation.created_at < until,
                )
                .order_by(Remediation.created_at, Remediation.id)
            )
        )
        admitted = _admissions(session, [row.id for row in rows])
        for row in rows:
            ended = None if row.state in fencing else row.finished_at
            found.append(
                RealRemediation(
                    node=row.node,
                    policy=row.policy,
                    pool=row.pool,
                    created_at=row.created_at,
                    ended_at=ended,
                    state=row.state,
                    ladder=tuple(str(step.get("action", "")) for step in row.ladder),
                    dry_run=row.dry_run,
                    new_node=row.new_node,
                    admitted_at=admitted.get(row.id),
                )
            )
    return found


def _admissions(session: Session, ids: Sequence[int]) -> dict[int, datetime]:
    """remediation id → when it left the queue, for those that were queued."""
    found: dict[int, datetime] = {}
    for start in range(0, len(ids), 1000):
        rows = session.execute(
            select(RemediationEvent.remediation_id, RemediationEvent.at).where(
                RemediationEvent.remediation_id.in_(ids[start : start + 1000]),
                RemediationEvent.from_state == State.QUEUED.value,
                RemediationEvent.to_state == State.DETECTED.value,
            )
        )
        for remediation_id, at in rows:
            found[remediation_id] = min(at, found.get(remediation_id, at))
    return found


_CLOSED = frozenset({State.SUCCEEDED.value, State.CANCELLED.value, State.FAILED.value})


def policy_versions(
    factory: sessionmaker[Session], cluster: str, until: datetime
) -> list[PolicyVersion]:
    with session_scope(factory) as session:
        rows = session.scalars(
            select(PolicySet)
            .where(
                PolicySet.cluster == cluster,
                PolicySet.status == "ok",
                PolicySet.loaded_at < until,
            )
            .order_by(PolicySet.loaded_at, PolicySet.id)
        )
        return [PolicyVersion(r.loaded_at, r.content_hash, dict(r.files)) for r in rows]


def _breaker(factory: sessionmaker[Session], cluster: str) -> BreakerRecord:
    with session_scope(factory) as session:
        row = session.get(ControllerState, cluster)
        if row is None:
            return BreakerRecord(None, None)
        return BreakerRecord(row.breaker_tripped_at, row.breaker_reset_at)


# -- the export file: gzip'd JSON lines, one record each, the header first -----------------------


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Header(_Line):
    type: str
    version: int
    cluster: str | None = None
    since: AwareDatetime
    until: AwareDatetime
    breaker_tripped_at: AwareDatetime | None = None
    breaker_reset_at: AwareDatetime | None = None


class _Cycle(_Line):
    type: str
    source: str
    at: list[AwareDatetime]


class _Run(_Line):
    type: str
    node: str
    gpu: int | None
    kind: SignalKind
    code: int | None
    value: float | None
    source: str
    labels: dict[str, str]
    gpu_uuid: str | None
    first_at: AwareDatetime
    last_at: AwareDatetime | None
    readings: int
    lag_ms: int
    observed_at: AwareDatetime | None = None  # version 2: the first reading's own time
    step_us: int | None = None


class _Node(_Line):
    type: str
    at: AwareDatetime
    node: str
    present: bool
    pool: str
    labels: dict[str, str]
    ready: bool
    cordoned: bool


class _Remediation(_Line):
    type: str
    node: str
    policy: str
    pool: str | None
    created_at: AwareDatetime
    ended_at: AwareDatetime | None
    state: str
    ladder: list[str]
    dry_run: bool
    new_node: str | None = None
    admitted_at: AwareDatetime | None = None


class _Policies(_Line):
    type: str
    loaded_at: AwareDatetime
    content_hash: str
    files: dict[str, str]


def export_lines(
    recording: Recording, runs: Iterable[ArchivedRun] | None = None
) -> Iterator[dict[str, Any]]:
    """The file's records; `runs` (a stream) stands in for the recording's own list."""
    yield _Header(
        type="header",
        version=FORMAT_VERSION,
        cluster=recording.cluster,
        since=recording.since,
        until=recording.until,
        breaker_tripped_at=recording.breaker.tripped_at,
        breaker_reset_at=recording.breaker.reset_at,
    ).model_dump(mode="json")
    for source, times in sorted(recording.cycles.items()):
        yield {"type": "cycles", "source": source, "at": [t.isoformat() for t in times]}
    for change in recording.nodes:
        yield _Node(
            type="node",
            at=change.at,
            node=change.node,
            present=change.present,
            pool=change.pool,
            labels=dict(change.labels),
            ready=change.ready,
            cordoned=change.cordoned,
        ).model_dump(mode="json")
    for item in recording.remediations:
        yield _Remediation(
            type="remediation",
            node=item.node,
            policy=item.policy,
            pool=item.pool,
            created_at=item.created_at,
            ended_at=item.ended_at,
            state=item.state,
            ladder=list(item.ladder),
            dry_run=item.dry_run,
            new_node=item.new_node,
            admitted_at=item.admitted_at,
        ).model_dump(mode="json")
    for version in recording.policy_versions:
        yield _Policies(
            type="policies",
            loaded_at=version.loaded_at,
            content_hash=version.content_hash,
            files=dict(version.files),
        ).model_dump(mode="json")
    for run in recording.runs if runs is None else runs:
        yield {
            "type": "run",
            "node": run.node,
            "gpu": run.gpu,
            "kind": run.kind.value,
            "code": run.code,
            "value": run.value,
            "source": run.source,
            "labels": dict(run.labels),
            "gpu_uuid": run.gpu_uuid,
            "first_at": run.first_at.isoformat(),
            "last_at": run.last_at.isoformat() if run.last_at else None,
            "readings": run.readings,
            "lag_ms": run.lag_ms,
            "observed_at": run.observed_at.isoformat() if run.observed_at else None,
            "step_us": run.step_us,
        }


def write_export(
    recording: Recording, out: IO[bytes], runs: Iterable[ArchivedRun] | None = None
) -> int:
    return write_exports([(recording, runs)], out)


def write_exports(
    sections: Iterable[tuple[Recording, Iterable[ArchivedRun] | None]], out: IO[bytes]
) -> int:
    """One file, one section (a header and its records) per cluster."""
    count = 0
    with gzip.GzipFile(fileobj=out, mode="wb") as zipped:
        for recording, runs in sections:
            for line in export_lines(recording, runs):
                zipped.write(json.dumps(line, separators=(",", ":")).encode() + b"\n")
                count += 1
    return count


RunFilterFor = Callable[[Sequence[PolicyVersion]], RunFilter]


def read_export(path: Path, filter_for: RunFilterFor | None = None) -> Recording:
    """A file of one cluster (see read_exports)."""
    sections = read_exports(path, filter_for)
    if len(sections) > 1:
        names = ", ".join(r.cluster for r in sections)
        raise RecordingError(f"{path}: holds several clusters ({names})")
    return sections[0]


def read_exports(path: Path, filter_for: RunFilterFor | None = None) -> list[Recording]:
    """Read a `signals export` file, one recording per cluster section; a bad line is an error
    naming its number. With `filter_for`, only the runs a replay needs are kept (see
    RunFilter): it is asked, with the section's policy versions, when its runs begin (the
    writer puts them last)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return _parse(enumerate(handle, start=1), path, filter_for)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise RecordingError(f"{path}: cannot read: {exc}") from exc


class _Keep:
    """The file reader's RunFilter: runs come in time order, so the runs that follow a breach
    on its series are kept while they may carry the streak, and the first that ends it."""

    def __init__(self) -> None:
        self._carrying: dict[tuple[Any, ...], bool] = {}

    def __call__(self, wanted: RunFilter, data: dict[str, Any]) -> bool:
        kind = data.get("kind")
        if kind in wanted.every_kind:
            return True
        level = wanted.levels.get(str(kind))
        if level is None:
            return False
        raw = data.get("value")
        value = float(raw) if isinstance(raw, int | float) else None
        key = (data.get("node"), data.get("gpu"), kind, data.get("code"), data.get("source"))
        if level.breaches(value):
            self._carrying[key] = True
            return True
        if self._carrying.get(key):
            self._carrying[key] = level.keeps(value)
            return True
        return False


@dataclass
class _Section:
    """One cluster's records as they are read."""

    header: _Header
    wanted: RunFilter | None = None
    keep: _Keep = field(default_factory=_Keep)
    cycles: dict[str, list[datetime]] = field(default_factory=dict)
    runs: list[ArchivedRun] = field(default_factory=list)
    nodes: list[NodeChange] = field(default_factory=list)
    remediations: list[RealRemediation] = field(default_factory=list)
    versions: list[PolicyVersion] = field(default_factory=list)

    def recording(self) -> Recording:
        for times in self.cycles.values():
            times.sort()
        return Recording(
            since=self.header.since,
            until=self.header.until,
            cycles=self.cycles,
            runs=self.runs,
            nodes=self.nodes,
            remediations=self.remediations,
            policy_versions=self.versions,
            breaker=BreakerRecord(self.header.breaker_tripped_at, self.header.breaker_reset_at),
            cluster=self.header.cluster or DEFAULT_CLUSTER,
        )


def _parse(
    lines: Iterable[tuple[int, str]], path: Path, filter_for: RunFilterFor | None
) -> list[Recording]:
    sections: list[_Section] = []
    for number, text in lines:
        if not text.strip():
            continue
        try:
            data = json.loads(text)
            kind = data.get("type") if isinstance(data, dict) else None
            if kind == "header":
                header = _Header.model_validate(data)
                if header.version not in READABLE_VERSIONS:
                    raise ValueError(f"format version {header.version}, expected {FORMAT_VERSION}")
                if header.version == 1 and sections:
                    raise ValueError("a second header in a version 1 file")
                if any(s.header.cluster == header.cluster for s in sections):
                    raise ValueError(f"cluster {header.cluster!r} appears twice")
                sections.append(_Section(header))
                continue
            if not sections:
                raise ValueError("the first line must be the header")
            _parse_line(sections[-1], kind, data, filter_for)
        except (ValueError, ValidationError) as exc:
            raise RecordingError(f"{path}:{number}: {exc}") from exc
    if not sections:
        raise RecordingError(f"{path}: empty export (no header line)")
    return [section.recording() for section in sections]


def _parse_line(
    section: _Section, kind: Any, data: dict[str, Any], filter_for: RunFilterFor | None
) -> None:
    if kind == "cycles":
        cycle = _Cycle.model_validate(data)
        section.cycles.setdefault(cycle.source, []).extend(cycle.at)
    elif kind == "run":
        if filter_for is not None and section.wanted is None:
            section.wanted = filter_for(section.versions)
        if section.wanted is not None and not section.keep(section.wanted, data):
            return
        r = _Run.model_validate(data)
        section.runs.append(
            ArchivedRun(
                r.node,
                r.gpu,
                r.kind,
                r.code,
                r.value,
                r.source,
                r.labels,
                r.gpu_uuid,
                r.first_at,
                r.last_at,
                r.readings,
                r.lag_ms,
                r.observed_at,
                r.step_us,
            )
        )
    elif kind == "node":
        n = _Node.model_validate(data)
        section.nodes.append(
            NodeChange(n.at, n.node, n.present, n.pool, n.labels, n.ready, n.cordoned)
        )
    elif kind == "remediation":
        m = _Remediation.model_validate(data)
        section.remediations.append(
            RealRemediation(
                m.node,
                m.policy,
                m.pool,
                m.created_at,
                m.ended_at,
                m.state,
                tuple(m.ladder),
                m.dry_run,
                m.new_node,
                m.admitted_at,
            )
        )
    elif kind == "policies":
        if section.wanted is not None:
            raise ValueError("policy versions after the runs: not a file this writes")
        p = _Policies.model_validate(data)
        section.versions.append(PolicyVersion(p.loaded_at, p.content_hash, p.files))
    else:
        raise ValueError(f"unknown record type {kind!r}")
