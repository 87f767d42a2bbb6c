"""Validation results as the timeline holds them: each run of the validate step ends in one
transition out of VALIDATING (`validate_done` or `validate_failed`) whose detail carries the
node, whether it was a new machine, its inventory and each check's verdict and time. Read here
for a pool's baseline (the inventories of its validated nodes) and for the DOA figures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session, sessionmaker

from remediator.model.states import State
from remediator.store.db import session_scope
from remediator.store.models import Remediation, RemediationEvent

PASSED = "validate_done"
FAILED = "validate_failed"


@dataclass(frozen=True)
class ValidationRun:
    remediation_id: int
    pool: str | None
    at: datetime
    passed: bool
    detail: Mapping[str, Any]
    event_id: int = 0

    @property
    def node(self) -> str:
        return str(self.detail.get("node") or "")

    @property
    def new_machine(self) -> bool:
        return bool(self.detail.get("new_machine"))

    @property
    def inventory(self) -> Mapping[str, Any]:
        raw = self.detail.get("inventory")
        return raw if isinstance(raw, Mapping) else {}


def validation_runs(
    factory: sessionmaker[Session],
    cluster: str,
    *,
    pool: str | None = None,
    since: datetime | None = None,
    limit: int = 2000,
) -> tuple[ValidationRun, ...]:
    """The newest validation runs first."""
    query = (
        select(RemediationEvent, Remediation.pool)
        .join(Remediation, Remediation.id == RemediationEvent.remediation_id)
        .where(
            RemediationEvent.cluster == cluster,
            RemediationEvent.from_state == State.VALIDATING.value,
            RemediationEvent.action.in_((PASSED, FAILED)),
        )
        .order_by(RemediationEvent.at.desc(), RemediationEvent.id.desc())
        .limit(limit)
    )
    if pool is not None:
        query = query.where(Remediation.pool == pool)
    if since is not None:
        query = query.where(RemediationEvent.at >= since)
    with session_scope(factory) as session:
        return tuple(
            ValidationRun(event.remediation_id, row_pool, event.at, passed, detail, event.id)
            for event, row_pool in session.execute(query)
            for detail, passed in per_node(dict(event.detail or {}), event.action == PASSED)
        )


# Where a page of validation runs ended: the (time, id) of its last validation event.
Position = tuple[datetime, int]


@dataclass(frozen=True)
class RunFilter:
    pool: str | None = None
    node: str | None = None
    passed: bool | None = None
    new_machine: bool | None = None
    since: datetime | None = None
    until: datetime | None = None

    def keeps(self, run: ValidationRun) -> bool:
        """The per-run conditions (a rack's event holds runs of several trays)."""
        return (
            (self.node is None or run.node == self.node)
            and (self.passed is None or run.passed == self.passed)
            and (self.new_machine is None or run.new_machine == self.new_machine)
        )


def validation_page(
    factory: sessionmaker[Session],
    cluster: str,
    filters: RunFilter,
    after: Position | None,
    limit: int,
) -> tuple[tuple[ValidationRun, ...], Position | None]:
    """Up to `limit` runs, newest first, from the event after `after`; and where the next page
    starts (None: nothing older). A page ends on an event's boundary, so a rack's trays are
    never split between pages (such a page may hold a few more than `limit`)."""
    query = (
        select(RemediationEvent, Remediation.pool)
        .join(Remediation, Remediation.id == RemediationEvent.remediation_id)
        .where(
            RemediationEvent.cluster == cluster,
            RemediationEvent.from_state == State.VALIDATING.value,
            RemediationEvent.action.in_((PASSED, FAILED)),
        )
        .order_by(RemediationEvent.at.desc(), RemediationEvent.id.desc())
    )
    if filters.pool is not None:
        query = query.where(Remediation.pool == filters.pool)
    if filters.since is not None:
        query = query.where(RemediationEvent.at >= filters.since)
    if filters.until is not None:
        query = query.where(RemediationEvent.at < filters.until)
    runs: list[ValidationRun] = []
    position = after
    with session_scope(factory) as session:
        while True:
            batch = query
            if position is not None:
                at, event_id = position
                batch = batch.where(
                    or_(
                        RemediationEvent.at < at,
                        and_(RemediationEvent.at == at, RemediationEvent.id < event_id),
                    )
                )
            rows = session.execute(batch.limit(limit)).all()
            for event, row_pool in rows:
                position = (event.at, event.id)
                runs += [
                    run
                    for detail, passed in per_node(dict(event.detail or {}), event.action == PASSED)
                    if filters.keeps(
                        run := ValidationRun(
                            event.remediation_id, row_pool, event.at, passed, detail, event.id
                        )
                    )
                ]
                if len(runs) >= limit:
                    return tuple(runs), position
            if len(rows) < limit:
                return tuple(runs), None


def per_node(detail: dict[str, Any], passed: bool) -> list[tuple[dict[str, Any], bool]]:
    """A rack's validation (its trays validated side by side, `trays` the verdict of each) as
    one run per tray, so a rack of 18 new trays counts 18 new machines in the DOA figures, not
    its lead tray alone. The event's own facts (inventory, checks) are the tray it names (the
    lead, or the first that failed); the others carry their verdict only, so they add nothing
    to a pool's baseline or to the checks' times."""
    trays = detail.get("trays")
    if not detail.get("rack") or not isinstance(trays, list) or not trays:
        return [(detail, passed)]
    shared = {k: v for k, v in detail.items() if k not in ("trays", "inventory", "checks")}
    out: list[tuple[dict[str, Any], bool]] = []
    for verdict in trays:
        if not isinstance(verdict, Mapping) or not verdict.get("node"):
            continue
        node = str(verdict["node"])
        own = detail if node == detail.get("node") else {**shared, "node": node}
        out.append(({k: v for k, v in own.items() if k != "trays"}, bool(verdict.get("passed"))))
    return out or [(detail, passed)]


def pool_inventories(runs: tuple[ValidationRun, ...]) -> dict[str, Mapping[str, Any]]:
    """Node → its latest passed inventory (runs newest first)."""
    seen: dict[str, Mapping[str, Any]] = {}
    for run in runs:
        if run.passed and run.inventory and run.node not in seen:
            seen[run.node] = run.inventory
    return seen


@dataclass(frozen=True)
class DoaRate:
    """Of `new_machines` validated, `failed` arrived bad."""

    key: str
    new_machines: int
    failed: int

    @property
    def percent(self) -> float:
        return 100.0 * self.failed / self.new_machines if self.new_machines else 0.0


@dataclass(frozen=True)
class CheckTime:
    check: str
    count: int
    median: float
    p90: float


@dataclass(frozen=True)
class ValidationFigures:
    runs: int
    overall: DoaRate
    by_pool: tuple[DoaRate, ...]
    by_model: tuple[DoaRate, ...]
    by_provider: tuple[DoaRate, ...]
    check_times: tuple[CheckTime, ...]


def _rates(runs: list[ValidationRun], key: str) -> tuple[DoaRate, ...]:
    groups: dict[str, list[ValidationRun]] = {}
    for run in runs:
        groups.setdefault(str(run.detail.get(key) or "unknown"), []).append(run)
    return tuple(
        DoaRate(name, len(group), sum(1 for r in group if not r.passed))
        for name, group in sorted(groups.items())
    )


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def validation_figures(runs: tuple[ValidationRun, ...]) -> ValidationFigures:
    """Dead-on-arrival rates (new machines that failed their validation) by pool, GPU model and
    provider, and how long each check took (every run, repaired nodes' included)."""
    new = [r for r in runs if r.new_machine]
    seconds: dict[str, list[float]] = {}
    for run in runs:
        for check in run.detail.get("checks") or ():
            if isinstance(check, Mapping) and check.get("seconds") is not None:
                seconds.setdefault(str(check.get("check")), []).append(float(check["seconds"]))
    return ValidationFigures(
        runs=len(runs),
        overall=DoaRate("all", len(new), sum(1 for r in new if not r.passed)),
        by_pool=_rates(new, "pool"),
        by_model=_rates(new, "gpu_model"),
        by_provider=_rates(new, "provider"),
        check_times=tuple(
            CheckTime(name, len(values), _quantile(values, 0.5), _quantile(values, 0.9))
            for name, values in sorted(seconds.items())
        ),
    )
