"""The console's shadow-mode report: what this controller would have done over the last days of
dry-run history (`remediator report`, remediator/shadow/)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from remediator.shadow.load import shadow_report
from remediator.web.access import Deps, Reader
from remediator.web.pages import render


def make_shadow_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/shadow", response_class=HTMLResponse)
    def shadow_page(
        request: Request,
        deps: Deps,
        principal: Reader,
        days: Annotated[int, Query(ge=1, le=90)] = 7,
    ) -> HTMLResponse:
        until = deps.clock.now()
        report = shadow_report(deps.repository, until - timedelta(days=days), until)
        return render(request, "shadow.html", principal, report=report, days=days)

    return router
