"""Fleet reliability in the console and the API (#28): failures per GPU-year by GPU model,
driver, VBIOS, pool and cluster, mean time between failures, top offenders — `GET
/api/v1/reliability`, the /reliability page (inline SVG bars, as the console's other charts) and
its CSV (`/reliability.csv`). Only the clusters the token may see are counted; the live nodes
of this console's cluster (when it has cluster access) add the GPUs the ledger never met."""

from __future__ import annotations

import csv
import io
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup, escape
from pydantic import BaseModel, Field

from remediator.ledger.identity import machine_id
from remediator.model.gpus import GPU_PRODUCT_LABEL, labelled_versions
from remediator.rma import reliability
from remediator.rma.reliability import (
    DIMENSIONS,
    EPISODE_GAP,
    MIN_GPU_YEARS,
    Figures,
    LiveNode,
    Row,
)
from remediator.web.access import Deps, Reader
from remediator.web.auth import Principal
from remediator.web.charts import FONT, PALETTE
from remediator.web.deps import WebDeps
from remediator.web.pages import render
from remediator.web.problems import ERRORS, WebError
from remediator.web.rma import CLUSTER

Days = Annotated[int, Query(ge=1, le=3660, description="the window, in days back from now")]
ClusterQuery = Annotated[str | None, Query(max_length=63, pattern=CLUSTER)]


class RowOut(BaseModel):
    key: str
    gpus: int
    gpu_years: float
    failures: int
    enough_data: bool = Field(
        description=f"at least {MIN_GPU_YEARS:g} GPU-years: below it there is no rate"
    )
    failures_per_gpu_year: float | None = Field(description="None: too little data")
    mtbf_hours: float | None = Field(description="None: too little data, or no failure")

    @classmethod
    def of(cls, row: Row) -> RowOut:
        return cls(
            key=row.key,
            gpus=row.gpus,
            gpu_years=row.gpu_years,
            failures=row.failures,
            enough_data=row.enough_data,
            failures_per_gpu_year=row.per_gpu_year,
            mtbf_hours=row.mtbf_hours,
        )


class OffenderOut(BaseModel):
    id: str
    failures: int
    last_at: datetime


class ReliabilityOut(BaseModel):
    since: datetime
    until: datetime
    overall: RowOut
    by_model: list[RowOut]
    by_driver: list[RowOut]
    by_vbios: list[RowOut]
    by_pool: list[RowOut]
    by_cluster: list[RowOut]
    top_gpus: list[OffenderOut]
    top_machines: list[OffenderOut]


def live_nodes(deps: WebDeps, clusters: Collection[str] | None) -> list[LiveNode]:
    """The nodes this console's cluster has now (none when it has no cluster access, as the
    fleet console): their GPU count, model and driver labels for the GPUs the ledger never met."""
    cluster = deps.settings.cluster_name
    if deps.list_nodes is None or (clusters is not None and cluster not in clusters):
        return []
    pool_label = deps.settings.pool_label
    return [
        LiveNode(
            cluster=cluster,
            node=n.name,
            machine=machine_id(n.provider_id, n.annotations),
            gpus=n.gpus,
            model=n.labels.get(GPU_PRODUCT_LABEL),
            driver=labelled_versions(n.labels).get("driver"),
            pool=n.labels.get(pool_label, ""),
            created_at=n.created_at,
        )
        for n in deps.list_nodes()
    ]


def compute(deps: WebDeps, principal: Principal, days: int, cluster: str | None) -> Figures:
    if cluster is not None and not principal.may_see(cluster):
        raise WebError(403, f"your token is not for cluster {cluster}")
    clusters = {cluster} if cluster is not None else principal.clusters
    since, until = reliability.window(deps.clock.now(), days)
    placed, failures, spans = reliability.read(
        deps.repository.session_factory, since=since, clusters=clusters
    )
    exposures = reliability.in_service(placed, spans, live_nodes(deps, clusters))
    return reliability.figures(exposures, failures, since=since, until=until)


def out(f: Figures) -> ReliabilityOut:
    def rows(d: str) -> list[RowOut]:
        return [RowOut.of(r) for r in f.by[d]]

    return ReliabilityOut(
        since=f.since,
        until=f.until,
        overall=RowOut.of(f.overall),
        by_model=rows("model"),
        by_driver=rows("driver"),
        by_vbios=rows("vbios"),
        by_pool=rows("pool"),
        by_cluster=rows("cluster"),
        top_gpus=[OffenderOut(id=o.id, failures=o.failures, last_at=o.last_at) for o in f.top_gpus],
        top_machines=[
            OffenderOut(id=o.id, failures=o.failures, last_at=o.last_at) for o in f.top_machines
        ],
    )


def bars(rows: Sequence[Row], colour: str) -> Markup:
    """Failures per GPU-year, one horizontal bar per group, its exact figure in a <title>."""
    shown = [r for r in rows if r.per_gpu_year is not None][:12]
    if not shown:
        return Markup(
            f'<p class="muted">too little data: no group has {MIN_GPU_YEARS:g} GPU-years '
            "in this window</p>"
        )
    top = max(r.per_gpu_year or 0.0 for r in shown) or 1.0
    width, label, row_h = 640, 220, 20
    height = row_h * len(shown) + 10
    parts = [
        f'<svg class="chart reliability" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="failures per GPU-year">'
    ]
    for i, r in enumerate(shown):
        rate = r.per_gpu_year or 0.0
        y = 5 + i * row_h
        length = max(1.0, (width - label - 80) * rate / top)
        name = escape(r.key)
        parts.append(
            f'<text x="{label - 6}" y="{y + 13}" text-anchor="end" {FONT}>{name}</text>'
            f'<rect x="{label}" y="{y + 2}" width="{length:.1f}" height="{row_h - 6}" '
            f'fill="{colour}"><title>{name}: {rate:.3f} failures per GPU-year, {r.failures} '
            f"failures over {r.gpu_years:.2f} GPU-years</title></rect>"
            f'<text x="{label + length + 4:.1f}" y="{y + 13}" {FONT}>{rate:.3f}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def as_csv(f: Figures) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(
        [
            "dimension",
            "key",
            "gpus",
            "gpu_years",
            "failures",
            "enough_data",
            "failures_per_gpu_year",
            "mtbf_hours",
        ]
    )
    for d, rows in [("fleet", (f.overall,)), *((d, f.by[d]) for d in DIMENSIONS)]:
        for r in rows:
            writer.writerow(
                [
                    d,
                    r.key,
                    r.gpus,
                    f"{r.gpu_years:.6f}",
                    r.failures,
                    "yes" if r.enough_data else "no",
                    "" if r.per_gpu_year is None else f"{r.per_gpu_year:.6f}",
                    "" if r.mtbf_hours is None else f"{r.mtbf_hours:.1f}",
                ]
            )
    for kind, offenders in (("top_gpu", f.top_gpus), ("top_machine", f.top_machines)):
        for o in offenders:
            writer.writerow([kind, o.id, "", "", o.failures, "", "", ""])
    return buffer.getvalue()


def make_reliability_router() -> APIRouter:
    router = APIRouter()

    @router.get("/api/v1/reliability", tags=["rma"], responses=ERRORS)
    def get_reliability(
        deps: Deps, principal: Reader, days: Days = 365, cluster: ClusterQuery = None
    ) -> ReliabilityOut:
        """Failures per GPU-year by model, driver, VBIOS, pool and cluster; MTBF; offenders."""
        return out(compute(deps, principal, days, cluster))

    @router.get("/reliability.csv", include_in_schema=False)
    def reliability_csv(
        deps: Deps, principal: Reader, days: Days = 365, cluster: ClusterQuery = None
    ) -> Response:
        return Response(
            as_csv(compute(deps, principal, days, cluster)),
            media_type="text/csv",
            headers={"content-disposition": 'attachment; filename="reliability.csv"'},
        )

    @router.get("/reliability", response_class=HTMLResponse, include_in_schema=False)
    def reliability_page(
        request: Request, deps: Deps, principal: Reader, days: Days = 365
    ) -> HTMLResponse:
        f = compute(deps, principal, days, None)
        charts = {d: bars(f.by[d], PALETTE[i]) for i, d in enumerate(DIMENSIONS)}
        return render(
            request,
            "reliability.html",
            principal,
            figures=f,
            charts=charts,
            days=days,
            min_gpu_years=f"{MIN_GPU_YEARS:g}",
            episode_minutes=f"{EPISODE_GAP.total_seconds() / 60:g}",
        )

    return router
