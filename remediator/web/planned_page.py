"""The console's planned-work page: each pool's maintenance windows (next opening, open now)
and every planned remediation with its deadline and chosen moment, from its timeline's last
`planned` line, with the planned budget's use (remediation/planned.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from remediator.model.states import State
from remediator.policy.loader import PolicySet
from remediator.policy.windows import Opening, first_opening
from remediator.remediation.planned import PLANNED_ACTION, planned_running
from remediator.store.records import RemediationRecord
from remediator.store.repository import Repository
from remediator.web.access import Deps, Reader
from remediator.web.pages import render


@dataclass(frozen=True)
class WindowRow:
    name: str
    start: str
    timezone: str
    duration: float
    pools: tuple[str, ...]
    next_opening: Opening | None
    open_now: bool


@dataclass(frozen=True)
class PlannedRow:
    record: RemediationRecord
    waiting: bool
    deadline: str | None
    moment: str | None
    reason: str | None
    window: str | None


@dataclass(frozen=True)
class PlannedView:
    windows: tuple[WindowRow, ...]
    pools: dict[str, list[str]]  # pool → its windows' names
    rows: tuple[PlannedRow, ...]
    budget_max: int
    budget_per_pool: int
    running: dict[str, int]


def window_rows(policies: PolicySet, now: datetime) -> tuple[WindowRow, ...]:
    rows = []
    for name, window in sorted(policies.settings.windows.items()):
        opening = first_opening(name, window, now)
        rows.append(
            WindowRow(
                name,
                window.start,
                window.timezone,
                window.duration.total_seconds(),
                tuple(window.pools),
                opening,
                opening is not None and opening.contains(now),
            )
        )
    return tuple(rows)


def planned_rows(
    repository: Repository, open_records: Sequence[RemediationRecord], policies: PolicySet
) -> tuple[PlannedRow, ...]:
    rows = []
    for record in open_records:
        policy = policies.policy(record.policy)
        if policy is None or policy.when is None:
            continue
        full = repository.get(record.id) or record
        plan = next((e.detail for e in reversed(full.events) if e.action == PLANNED_ACTION), {})
        rows.append(
            PlannedRow(
                full,
                full.state is State.QUEUED,
                plan.get("deadline"),
                plan.get("moment"),
                plan.get("reason"),
                plan.get("window"),
            )
        )
    return tuple(rows)


def planned_view(repository: Repository, policies: PolicySet, now: datetime) -> PlannedView:
    open_records = repository.list_open()
    pools: dict[str, list[str]] = {}
    for name, window in sorted(policies.settings.windows.items()):
        for pool in window.pools:
            pools.setdefault(pool, []).append(name)
    budget = policies.settings.planned
    return PlannedView(
        windows=window_rows(policies, now),
        pools=dict(sorted(pools.items())),
        rows=planned_rows(repository, open_records, policies),
        budget_max=budget.max_concurrent,
        budget_per_pool=budget.per_pool,
        running=planned_running(open_records, policies),
    )


def make_planned_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/planned", response_class=HTMLResponse)
    def planned_page(request: Request, deps: Deps, principal: Reader) -> HTMLResponse:
        active = deps.policies.active
        now = deps.clock.now()
        view = planned_view(deps.repository, active, now) if active is not None else None
        return render(request, "planned.html", principal, view=view)

    return router
