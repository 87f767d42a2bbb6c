"""Validation runs as JSON: `GET /api/v1/validations`, what the validations page shows run by
run — each machine's verdict, its checks with their reasons and times — for scripts and
dashboards. Any token may read it; newest first, filtered like the page (pool, node, outcome,
new machines, a time range) and paged with an opaque `next_cursor` like the remediations list."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from remediator.store.validations import Position, RunFilter, ValidationRun, validation_page
from remediator.web.access import Deps, require_reader
from remediator.web.problems import ERRORS, WebError
from remediator.web.query import QueryTime
from remediator.web.schemas import PRINTABLE

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
# Where the previous page ended: 16 digits of microseconds either side of the epoch (1653 to
# 2286) and 18 of event id (below BIGINT's 2**63).
CURSOR = r"^-?\d{1,16}\.\d{1,18}$"


class ValidationCheckOut(BaseModel):
    check: str = Field(description="inventory, dcgm, nccl or nccl_pair")
    passed: bool
    skipped: bool = Field(description="not judged (a policy gap, no peer): neither pass nor fail")
    reason: str
    seconds: float | None = Field(description="how long its programs ran, when known")


class ValidationOut(BaseModel):
    remediation_id: int
    node: str = Field(description="the machine validated (the replacement, else the node)")
    pool: str | None
    at: datetime = Field(description="when the verdict was recorded")
    passed: bool
    new_machine: bool
    reason: str = Field(description="the verdict in words: the first failing check's reason")
    gpu_model: str | None
    provider: str | None
    rack: str | None = Field(description="the rack, when its trays were validated together")
    checks: list[ValidationCheckOut]


class ValidationPageOut(BaseModel):
    items: list[ValidationOut]
    next_cursor: str | None


def _text(value: object) -> str | None:
    return str(value) if value not in (None, "") else None


def _check(raw: Mapping[str, Any]) -> ValidationCheckOut:
    seconds = raw.get("seconds")
    return ValidationCheckOut(
        check=str(raw.get("check") or ""),
        passed=bool(raw.get("passed")),
        skipped=bool(raw.get("skipped")),
        reason=str(raw.get("reason") or ""),
        seconds=float(seconds) if isinstance(seconds, int | float) else None,
    )


def validation_out(run: ValidationRun) -> ValidationOut:
    detail = run.detail
    checks = detail.get("checks")
    return ValidationOut(
        remediation_id=run.remediation_id,
        node=run.node,
        pool=run.pool,
        at=run.at,
        passed=run.passed,
        new_machine=run.new_machine,
        reason=str(detail.get("reason") or detail.get("result") or ""),
        gpu_model=_text(detail.get("gpu_model")),
        provider=_text(detail.get("provider")),
        rack=_text(detail.get("rack")),
        checks=[_check(c) for c in checks if isinstance(c, Mapping)]
        if isinstance(checks, list)
        else [],
    )


def encode_cursor(position: Position) -> str:
    at, event_id = position
    return f"{(at - EPOCH) // MICROSECOND}.{event_id}"


def decode_cursor(token: str) -> Position:
    """Every text the pattern allows is a position (microseconds since the epoch, then the
    event id; both bounded so nothing overflows): the schema states all the server checks."""
    at, event_id = token.split(".")
    return EPOCH + int(at) * MICROSECOND, int(event_id)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    try:
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except OverflowError as exc:
        raise WebError(422, f"{value.isoformat()} is out of range") from exc


def run_filter(
    pool: Annotated[str | None, Query(max_length=128, pattern=PRINTABLE)] = None,
    node: Annotated[str | None, Query(max_length=253, pattern=PRINTABLE)] = None,
    passed: Annotated[bool | None, Query(description="true: passed; false: failed")] = None,
    new_machine: Annotated[
        bool | None, Query(description="true: replacements; false: repaired nodes")
    ] = None,
    since: Annotated[QueryTime | None, Query(alias="from")] = None,
    until: Annotated[QueryTime | None, Query(alias="to")] = None,
) -> RunFilter:
    return RunFilter(pool, node, passed, new_machine, _utc(since), _utc(until))


def make_validations_api_router() -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["console"], responses=ERRORS)

    @router.get("/validations", dependencies=[Depends(require_reader)])
    def list_validations(
        deps: Deps,
        filters: Annotated[RunFilter, Depends(run_filter)],
        cursor: Annotated[
            str | None, Query(pattern=CURSOR, description="a page's `next_cursor`")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> ValidationPageOut:
        """Validation runs, newest first (a rack's trays one run each, never split between
        pages); follow `next_cursor` for older ones."""
        after = decode_cursor(cursor) if cursor else None
        repo = deps.repository
        runs, position = validation_page(repo.session_factory, repo.cluster, filters, after, limit)
        return ValidationPageOut(
            items=[validation_out(r) for r in runs],
            next_cursor=encode_cursor(position) if position is not None else None,
        )

    return router
