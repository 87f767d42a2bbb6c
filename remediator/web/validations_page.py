"""The console's burn-in figures: dead-on-arrival rates (new machines that failed their
validation) by pool, GPU model and provider, and each check's time — the pool view of #26. The
overview's tile links here (pages.py). The runs themselves as JSON: validations_api.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from remediator.store.validations import validation_figures, validation_runs
from remediator.web.access import Deps, Reader
from remediator.web.pages import render
from remediator.web.validations_api import make_validations_api_router


def make_validations_router() -> APIRouter:
    router = APIRouter()
    router.include_router(make_validations_api_router())

    @router.get("/validations", response_class=HTMLResponse, include_in_schema=False)
    def validations_page(
        request: Request,
        deps: Deps,
        principal: Reader,
        days: Annotated[int, Query(ge=1, le=90)] = 7,
        pool: Annotated[str | None, Query(max_length=128)] = None,
    ) -> HTMLResponse:
        repo = deps.repository
        since = deps.clock.now() - timedelta(days=days)
        runs = validation_runs(repo.session_factory, repo.cluster, pool=pool, since=since)
        return render(
            request,
            "validations.html",
            principal,
            figures=validation_figures(runs),
            recent=runs[:20],
            days=days,
            pool=pool,
        )

    return router
