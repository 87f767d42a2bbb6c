"""The console's backtest page: what a policy change would have done, as a table of differences
and a per-day chart. Either for a policy directory the controller can read (named in the
settings' `backtest_dirs`, e.g. a branch checked out beside the live one), replayed against this
cluster's archive, or for an uploaded `remediator policy backtest --format json` report."""

from __future__ import annotations

import json
from datetime import date, timedelta
from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup, escape
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import SQLAlchemyError

from remediator.backtest.render import to_json
from remediator.backtest.run import backtest_database
from remediator.errors import RemediatorError
from remediator.web.access import Deps, Reader
from remediator.web.auth import Principal
from remediator.web.charts import FONT, PALETTE, _nice_max
from remediator.web.pages import render
from remediator.web.problems import WebError

MAX_UPLOAD = 20_000_000  # characters of JSON
MAX_DAYS = 31
SERIES = (
    ("added", "added", PALETTE[2]),
    ("removed", "removed", PALETTE[5]),
    ("changed", "changed", PALETTE[1]),
    ("holds_added", "holds added", PALETTE[6]),
)


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class ItemIn(_Loose):
    node: str = Field(max_length=253)
    policy: str = Field(max_length=128)
    time: AwareDatetime
    detail: str = Field(default="", max_length=2000)


class SideIn(_Loose):
    name: str = Field(max_length=500)
    remediations: int
    holds: int


class HoldsIn(_Loose):
    added: list[ItemIn] = Field(default_factory=list)
    removed: list[ItemIn] = Field(default_factory=list)


class DayIn(_Loose):
    day: date
    added: int = 0
    removed: int = 0
    changed: int = 0
    holds_added: int = 0


class ReportIn(_Loose):
    """The `--format json` report, as far as the page shows it."""

    since: AwareDatetime
    until: AwareDatetime
    baseline: SideIn
    proposed: SideIn
    added: list[ItemIn]
    removed: list[ItemIn]
    changed: list[ItemIn]
    mismatches: list[ItemIn]
    holds: HoldsIn = Field(default_factory=HoldsIn)
    days: list[DayIn] = Field(default_factory=list)
    per_policy: dict[str, dict[str, int]] = Field(default_factory=dict)


def differences_per_day(days: list[DayIn]) -> Markup:
    """Grouped bars per day: remediations added, removed, changed, and holds added."""
    width, height, left, right, top, bottom = 720, 230, 40, 10, 34, 24
    peak = _nice_max(
        max((max(d.added, d.removed, d.changed, d.holds_added) for d in days), default=0) or 1
    )
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = plot_w / max(len(days), 1)
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="Backtest differences per day" xmlns="http://www.w3.org/2000/svg">'
    ]
    key_x = float(left)
    for _, label, colour in SERIES:
        parts.append(
            f'<rect x="{key_x:.0f}" y="6" width="10" height="10" fill="{colour}"/>'
            f'<text x="{key_x + 14:.0f}" y="15" {FONT}>{label}</text>'
        )
        key_x += 14 + 7 * len(label) + 18
    for fraction in (0, 0.5, 1):
        tick_y = top + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{tick_y:.1f}" y2="{tick_y:.1f}" '
            f'stroke="#ddd"/><text x="{left - 6}" y="{tick_y + 4:.1f}" text-anchor="end" {FONT}>'
            f"{peak * fraction:g}</text>"
        )
    label_every = max(1, len(days) // 10)
    bar_w = slot * 0.8 / len(SERIES)
    for i, day in enumerate(days):
        x0 = left + i * slot + slot * 0.1
        for j, (field, label, colour) in enumerate(SERIES):
            n = int(getattr(day, field))
            if not n:
                continue
            h = plot_h * n / peak
            parts.append(
                f'<rect x="{x0 + j * bar_w:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" '
                f'height="{h:.1f}" fill="{colour}"><title>{day.day.isoformat()} {label}: {n}'
                "</title></rect>"
            )
        if i % label_every == 0 or i == len(days) - 1:
            parts.append(
                f'<text x="{x0 + slot * 0.4:.1f}" y="{height - 6}" text-anchor="middle" {FONT}>'
                f"{day.day.strftime('%m-%d')}</text>"
            )
    if not any(d.added or d.removed or d.changed or d.holds_added for d in days):
        parts.append(
            f'<text x="{width / 2}" y="{top + plot_h / 2}" text-anchor="middle" {FONT}>'
            f"{escape('no differences in this window')}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def parse_report(text: str) -> ReportIn:
    if len(text) > MAX_UPLOAD:
        raise WebError(413, f"the report is larger than {MAX_UPLOAD:,} characters")
    try:
        return ReportIn.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise WebError(422, f"not JSON: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise WebError(
            422, f"not a backtest report (--format json): {where}: {first['msg']}"
        ) from exc


def make_backtest_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/backtest", response_class=HTMLResponse)
    def backtest_page(
        request: Request,
        deps: Deps,
        principal: Reader,
        directory: Annotated[str | None, Query(alias="dir", max_length=128)] = None,
        days: Annotated[int, Query(ge=1, le=MAX_DAYS)] = 7,
    ) -> HTMLResponse:
        choices = sorted(deps.settings.backtest_dirs)
        report: ReportIn | None = None
        if directory:
            path = deps.settings.backtest_dirs.get(directory)
            if path is None:
                raise WebError(404, f"no backtest directory named {directory!r} in the settings")
            until = deps.clock.now()
            try:
                result = backtest_database(
                    deps.repository.session_factory,
                    deps.settings.cluster_name,
                    path,
                    until - timedelta(days=days),
                    until,
                )
            except (RemediatorError, SQLAlchemyError) as exc:
                raise WebError(422, f"the backtest could not run: {exc}") from exc
            report = ReportIn.model_validate(to_json(result))
        return _show(request, principal, report, choices, directory, days)

    @router.post("/backtest", response_class=HTMLResponse)
    def backtest_upload(
        request: Request,
        deps: Deps,
        principal: Reader,
        report: Annotated[str, Form(max_length=MAX_UPLOAD)],
    ) -> HTMLResponse:
        parsed = parse_report(report)
        return _show(request, principal, parsed, sorted(deps.settings.backtest_dirs), None, 7)

    return router


def _show(
    request: Request,
    principal: Principal,
    report: ReportIn | None,
    choices: list[str],
    directory: str | None,
    days: int,
) -> HTMLResponse:
    return render(
        request,
        "backtest.html",
        principal,
        report=report,
        chart=differences_per_day(report.days) if report else None,
        choices=choices,
        chosen=directory,
        days=days,
        sections=_sections(report) if report else [],
    )


def _sections(report: ReportIn) -> list[tuple[str, list[ItemIn]]]:
    return [
        ("Added remediations", report.added),
        ("Removed remediations", report.removed),
        ("Changed remediations", report.changed),
        ("Budget holds added", report.holds.added),
        ("Budget holds removed", report.holds.removed),
        ("Mismatches with history", report.mismatches),
    ]
