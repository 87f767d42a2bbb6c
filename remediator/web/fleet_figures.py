"""Fleet figures for capacity planning: per cluster, pool and GPU model, the faults, how they
ended (repaired or replaced, each replacement a spare used), time to repair (median, p90),
GPU-hours out of service, workload GPU-hours disrupted, storm-breaker and fleet-breaker trips; a
fleet-wide daily chart; the same table as JSON and CSV.

Grouping is pure (`group_figures`); the groups come per cluster and day from
store/fleet_rollups (finished days rolled up once, the rest computed from the same
out-of-service spans each cluster's own overview counts).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel

from remediator.store import stats
from remediator.store.fleet import breaker_trips, fleet_breaker_trips
from remediator.store.fleet_rollups import Figures, FleetRollups
from remediator.web import charts, pages
from remediator.web.access import Reader
from remediator.web.auth import Principal
from remediator.web.problems import WebError

if TYPE_CHECKING:
    from remediator.web.fleet import Fleet

MAX_DAYS = 366
Clusters = Annotated[list[str] | None, Query(alias="cluster")]
Days = Annotated[int, Query(ge=1, le=MAX_DAYS)]
CSV_FIELDS = (
    "cluster",
    "pool",
    "gpu_model",
    "faults",
    "repaired",
    "replaced",
    "spares_used",
    "repair_median_seconds",
    "repair_p90_seconds",
    "gpu_hours_out_of_service",
    "disrupted_workload_gpu_hours",
    "breaker_trips",
    "fleet_breaker_trips",
)


class FigureOut(BaseModel):
    cluster: str
    pool: str
    gpu_model: str
    faults: int
    repaired: int
    replaced: int
    spares_used: int
    repair_median_seconds: float | None
    repair_p90_seconds: float | None
    gpu_hours_out_of_service: float
    disrupted_workload_gpu_hours: float
    # The cluster's, repeated on each of its rows: a trip stops a whole cluster, not a pool.
    breaker_trips: int
    # The fleet breaker's trips while the cluster took part (each stopped it, whole).
    fleet_breaker_trips: int


class DayOut(BaseModel):
    day: date
    cluster: str
    faults: int


class FleetFiguresOut(BaseModel):
    since: datetime
    until: datetime
    rows: list[FigureOut]
    daily: list[DayOut]


def percentile(ordered: Sequence[float], fraction: float) -> float | None:
    """As each cluster's overview computes it (interpolated between the nearest repairs), so
    the two pages agree: the median of 10 and 30 minutes is 20, not the lower one."""
    return stats.percentile(ordered, fraction) if ordered else None


def group_figures(
    figures: Figures, trips: Mapping[str, int], fleet_trips: Mapping[str, int], now: datetime
) -> list[FigureOut]:
    rows = []
    for (cluster, pool, model), g in sorted(figures.groups.items()):
        repairs = sorted(g.repairs)  # once for both percentiles: a month is ~400,000
        rows.append(
            FigureOut(
                cluster=cluster,
                pool=pool,
                gpu_model=model,
                faults=g.faults,
                repaired=g.repaired,
                replaced=g.replaced,
                spares_used=g.replaced,
                repair_median_seconds=percentile(repairs, 0.5),
                repair_p90_seconds=percentile(repairs, 0.9),
                gpu_hours_out_of_service=round(g.lost(now), 3),
                disrupted_workload_gpu_hours=round(g.disrupted(now), 3),
                breaker_trips=trips.get(cluster, 0),
                fleet_breaker_trips=fleet_trips.get(cluster, 0),
            )
        )
    return rows


def daily(figures: Figures) -> list[DayOut]:
    return [
        DayOut(day=d, cluster=c, faults=n)
        for (c, d), n in sorted(figures.daily.items(), key=lambda item: (item[0][1], item[0][0]))
    ]


def to_csv(rows: Sequence[FigureOut]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.model_dump().items()})
    return out.getvalue()


def make_figures_router(fleet: Fleet) -> APIRouter:
    router = APIRouter()
    rollups = FleetRollups(fleet.queries.session_factory)

    def compute(principal: Principal, clusters: list[str] | None, days: int) -> FleetFiguresOut:
        queries = fleet.queries
        visible = principal.clusters
        known = queries.clusters(visible)
        if clusters:
            refused = [c for c in clusters if not principal.may_see(c)]
            if refused:
                raise WebError(403, f"your token is not for cluster {refused[0]}")
            names = [c for c in known if c in clusters]
        else:
            names = list(known)
        now = fleet.clock.now()
        start = datetime.combine(now.date() - timedelta(days=days - 1), time.min, UTC)
        figures = rollups.figures(names, start.date(), now)
        trips = breaker_trips(queries.session_factory, names, start)
        fleet_trips = fleet_breaker_trips(queries.session_factory, names, start)
        return FleetFiguresOut(
            since=start,
            until=now,
            rows=group_figures(figures, trips, fleet_trips, now),
            daily=daily(figures),
        )

    @router.get("/api/v1/fleet/figures", tags=["fleet"])
    def figures_json(
        principal: Reader, cluster: Clusters = None, days: Days = 30
    ) -> FleetFiguresOut:
        """Faults and repairs per cluster, pool and GPU model over the last `days` UTC days."""
        return compute(principal, cluster, days)

    @router.get("/api/v1/fleet/figures.csv", tags=["fleet"], response_class=Response)
    def figures_csv(principal: Reader, cluster: Clusters = None, days: Days = 30) -> Response:
        """The same rows as CSV, one per cluster, pool and GPU model."""
        found = compute(principal, cluster, days)
        return Response(
            to_csv(found.rows),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="fleet-figures.csv"'},
        )

    @router.get("/fleet/figures", response_class=HTMLResponse, include_in_schema=False)
    def figures_page(
        request: Request, principal: Reader, cluster: Clusters = None, days: Days = 30
    ) -> HTMLResponse:
        found = compute(principal, cluster, days)
        day_list = [found.since.date() + timedelta(days=i) for i in range(days)]
        per_day: dict[date, dict[str, float]] = {d: {} for d in day_list}
        for entry in found.daily:
            per_day.setdefault(entry.day, {})[entry.cluster] = entry.faults
        chart = charts.daily_stacked(
            per_day, day_list, "Faults per day by cluster", "no faults in this window"
        )
        return pages.render(
            request,
            "fleet_figures.html",
            principal,
            cluster="fleet",
            controller=None,
            sources_down=[],
            figures=found,
            chart=chart,
            days=days,
            chosen=cluster or [],
        )

    return router
