"""The fleet-wide breaker in the console: its state for every page's banner (the per-cluster
consoles and the fleet console alike read the one shared row), `GET /api/v1/fleet/breaker`, and
the human reset (`POST /api/v1/fleet/breaker/reset`, the fleet page's form).

A reset releases every cluster at once, so only an operator token for the whole fleet (no
`clusters:` list) may ask for it; it is audited in every cluster's log, naming who and why,
whether it was done or refused."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field

from remediator.store.audit import AuditLog
from remediator.store.clusters import ClusterRegistry
from remediator.store.fleet_breaker import (
    RESET_COMMAND,
    WAS_TRIPPED,
    FleetBreakerStatus,
    FleetBreakerStore,
)
from remediator.web import pages
from remediator.web.access import Reader, web_deps
from remediator.web.oncall import Asked, asker_for, record_command
from remediator.web.problems import ERRORS, WebError

COMMAND = RESET_COMMAND


class FleetBreakerOut(BaseModel):
    tripped: bool
    tripped_at: datetime | None
    tripped_by: str | None = Field(description="the cluster whose controller saw the storm first")
    reason: str | None
    reset_by: str | None
    reset_at: datetime | None
    reset_reason: str | None


class FleetBreakerResetIn(BaseModel):
    reason: str = Field(min_length=1, max_length=2000, description="why; audited in every cluster")


def breaker_out(status: FleetBreakerStatus) -> FleetBreakerOut:
    return FleetBreakerOut(
        tripped=status.tripped,
        tripped_at=status.tripped_at,
        tripped_by=status.tripped_by,
        reason=status.reason,
        reset_by=status.reset_by,
        reset_at=status.reset_at,
        reset_reason=status.reset_reason,
    )


def store_of(request: Request) -> FleetBreakerStore:
    deps = web_deps(request)
    return FleetBreakerStore(deps.repository.session_factory, deps.clock)


def banner(request: Request) -> FleetBreakerStatus | None:
    """The fleet breaker when it is tripped, for every page's banner."""
    status = store_of(request).status()
    return status if status.tripped else None


def audited_clusters(request: Request) -> tuple[str, ...]:
    """Every cluster of the database (the reset releases them all), else the console's own."""
    deps = web_deps(request)
    names = ClusterRegistry(deps.repository.session_factory).names()
    own = deps.settings.cluster_name
    return tuple(names) if names else (own,)


def every_cluster(request: Request) -> tuple[AuditLog, ...]:
    """The reset's audit logs: done or refused, it is a row in every cluster's."""
    deps = web_deps(request)
    return tuple(
        AuditLog(deps.repository.session_factory, cluster, deps.clock)
        for cluster in audited_clusters(request)
    )


ResetAsker = Annotated[Asked, Depends(asker_for(COMMAND, every_cluster))]


def reset(ask: Asked, request: Request, reason: str) -> FleetBreakerStatus:
    """Run the reset for a fleet-wide operator; a refusal (a scoped token, no reason) is
    audited in every cluster by the console's refusal handler."""
    reason = reason.strip()
    if ask.principal.clusters is not None:
        raise WebError(
            403, "the fleet breaker stops every cluster: only a fleet-wide token resets it"
        )
    if not reason:
        raise WebError(422, "say why: the reason is audited in every cluster")
    store = store_of(request)
    was = store.status()
    status = store.reset(by=ask.principal.actor, reason=reason)
    detail = f"{WAS_TRIPPED}{was.reason}" if was.tripped else "was not tripped"
    record_command(ask, COMMAND, "done", reason, detail=detail, target="fleet breaker")
    return status


def make_fleet_breaker_router() -> APIRouter:
    router = APIRouter()

    @router.get("/api/v1/fleet/breaker", tags=["fleet"], responses=ERRORS)
    def get_fleet_breaker(request: Request, principal: Reader) -> FleetBreakerOut:
        """The fleet-wide breaker shared by every cluster of this database."""
        return breaker_out(store_of(request).status())

    @router.post("/api/v1/fleet/breaker/reset", tags=["fleet"], responses=ERRORS)
    def reset_fleet_breaker(
        request: Request, ask: ResetAsker, body: Annotated[FleetBreakerResetIn, Body()]
    ) -> FleetBreakerOut:
        """Release every cluster the fleet breaker holds. Needs an operator token for the
        whole fleet; audited in every cluster with who and why."""
        return breaker_out(reset(ask, request, body.reason))

    @router.post("/fleet/breaker/reset", include_in_schema=False)
    def reset_form(
        request: Request, ask: ResetAsker, reason: Annotated[str, Form(max_length=2000)] = ""
    ) -> Response:
        reset(ask, request, reason)
        back = "/fleet" if getattr(request.app.state, "fleet_console", False) else "/"
        return RedirectResponse(f"{back}?done={COMMAND}", 303)

    return router


pages.TEMPLATES.env.globals["fleet_breaker_banner"] = banner
