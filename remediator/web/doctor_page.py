"""The console's doctor page: `remediator doctor` for the settings this controller runs with,
run when the page is opened (every check reads only and is bounded, so the page answers within
the bound)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from remediator.doctor.run import doctor
from remediator.web.access import Deps, Reader
from remediator.web.pages import render

PAGE_TIMEOUT = 10.0


def make_doctor_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/doctor", response_class=HTMLResponse)
    def doctor_page(request: Request, deps: Deps, principal: Reader) -> HTMLResponse:
        report = doctor(deps.settings, PAGE_TIMEOUT)
        return render(request, "doctor.html", principal, report=report)

    return router
