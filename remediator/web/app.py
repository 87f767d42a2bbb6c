"""The console application: pages, the JSON API, the push endpoints, metrics and probes.

The controller builds a WebDeps and serves `create_app(deps)` with uvicorn. Errors answer JSON
`{"reason": …}` under /api and a readable page elsewhere; an unauthenticated browser is sent to
the login page rather than shown a bare 401.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, disable_created_metrics, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from remediator.errors import TransientError
from remediator.signals.sources.push import make_signals_router
from remediator.store.audit import AuditLog
from remediator.store.db import session_scope
from remediator.store.sessions import SessionStore
from remediator.web import pages, runbooks
from remediator.web.access import Deps, require_pusher
from remediator.web.agents import make_agents_router
from remediator.web.api import make_api_router
from remediator.web.backtest_page import make_backtest_router
from remediator.web.console import PolicyTexts
from remediator.web.deps import WebDeps
from remediator.web.doctor_page import make_doctor_router
from remediator.web.edge import NO_STORE_EXEMPT, BodyLimit
from remediator.web.fences import make_fences_router
from remediator.web.fleet_breaker import make_fleet_breaker_router
from remediator.web.hardware import make_hardware_router
from remediator.web.heartbeat_lane import HeartbeatLane
from remediator.web.intake import fill_intake, make_intake_router, register_intake
from remediator.web.metrics import ConsoleMetrics
from remediator.web.oncall import audit_refusal, client_address
from remediator.web.optouts import make_optouts_router
from remediator.web.planned_page import make_planned_router
from remediator.web.problems import WebError
from remediator.web.query import single_valued_query
from remediator.web.racks import make_racks_router
from remediator.web.reliability import make_reliability_router
from remediator.web.rma import make_rma_router
from remediator.web.schemas import HealthOut
from remediator.web.shadow_page import make_shadow_router
from remediator.web.signal_dispositions import make_dispositions_router
from remediator.web.validations_page import make_validations_router

log = logging.getLogger(__name__)
# What a client waits before asking again while the database does not answer: about the time
# a PostgreSQL failover takes.
DATABASE_RETRY_SECONDS = 5
STATIC = Path(__file__).parent / "static"
# The console's pages, the API docs included (Swagger UI is shipped in static/swagger-ui and
# started by our own file, no inline script), load nothing from elsewhere and must
# never be framed: a framed page would let another site trick an operator into clicking
# Approve (clickjacking).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/") or request.url.path in ("/healthz", "/readyz")


def _error(request: Request, status: int, reason: str, detail: object = None) -> Response:
    if _wants_json(request):
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        body = {"reason": reason, "detail": jsonable_encoder(detail)}
        return JSONResponse(body, status, headers=headers)
    if status == 401 and request.method == "GET":
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", 303)
    return pages.error_page(request, status, reason)


def _refused(request: Request, status: int, reason: str) -> None:
    """Count and log a refused request: path and address, never the token it carried."""
    metrics: ConsoleMetrics = request.app.state.metrics
    kind = "unauthenticated" if status == 401 else "forbidden"
    metrics.auth_failures.labels(kind).inc()
    address = client_address(request)
    log.warning(
        "%s %s refused (%d) for %s: %s",
        request.method,
        request.url.path,
        status,
        address,
        reason,
        extra={"source": address, "status": status, "path": request.url.path},
    )


def readiness_problems(deps: WebDeps) -> list[str]:
    """Ready: the database answers and, on the leader, so does the cluster."""
    problems: list[str] = []
    try:
        with session_scope(deps.repository.session_factory) as session:
            session.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        problems.append(f"database unreachable: {exc.__class__.__name__}")
    if deps.is_leader():
        cluster = deps.check_cluster()
        if cluster is not None:
            problems.append(f"cluster unreachable: {cluster}")
    return problems


def sources_down(deps: WebDeps) -> list[str]:
    """Down signal sources, named with their error: the console still serves without them
    (history, commands), so they are reported, never a reason to fail the probe."""
    return [f"{s.source}: {s.error or 'down'}" for s in deps.repository.source_health() if not s.up]


def create_app(deps: WebDeps) -> FastAPI:
    app = FastAPI(
        title="remediator",
        summary="GPU node remediation: history, on-call commands and signal intake.",
        version="1",
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
        dependencies=[Depends(single_valued_query)],
    )
    app.add_middleware(BodyLimit, limit=deps.settings.web.max_body_bytes)
    app.state.deps = deps
    # A _created sample per series doubles /metrics for a value nobody queries.
    disable_created_metrics()
    app.state.metrics = ConsoleMetrics(deps.registry)
    app.state.policy_texts = PolicyTexts()
    app.state.runbooks = runbooks.Runbooks(deps.runbooks_dir or runbooks.find_dir())
    repo = deps.repository
    app.state.audit = AuditLog(repo.session_factory, repo.cluster, deps.clock)
    app.state.sessions = SessionStore(repo.session_factory, repo.cluster, deps.clock)
    fill_intake(deps)
    register_intake(deps, deps.registry)

    @app.exception_handler(WebError)
    async def _web_error(request: Request, exc: WebError) -> Response:
        if exc.status in (401, 403):
            _refused(request, exc.status, exc.reason)
        await audit_refusal(request, exc.status, exc.reason)
        return _error(request, exc.status, exc.reason)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        response = _error(request, exc.status_code, str(exc.detail))
        for name, value in (exc.headers or {}).items():  # 405's Allow, for one
            response.headers[name] = value
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(_allowed(request))
        return response

    @app.exception_handler(TransientError)
    async def _unreachable(request: Request, exc: TransientError) -> Response:
        """A dependency a command reads (the cluster, slurmctld) did not answer: nothing was
        written; the asker retries (503 with Retry-After), as for a database outage."""
        response = _error(request, 503, f"{exc}; nothing was done: retry")
        response.headers["Retry-After"] = str(max(1, math.ceil(exc.delay)))
        return response

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _database_down(request: Request, exc: SQLAlchemyError) -> Response:
        """The database did not answer (an outage, a failover): said so, with when to retry,
        as the fleet console does; the traceback is no one's business but the log's."""
        log.warning(
            "database down: %s %s: %s", request.method, request.url.path, exc.__class__.__name__
        )
        reason = f"database down ({exc.__class__.__name__}): nothing was read or written; retry"
        response = _error(request, 503, reason)
        response.headers["Retry-After"] = str(DATABASE_RETRY_SECONDS)
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = [
            {"field": ".".join(str(p) for p in err["loc"]), "reason": err["msg"]}
            for err in exc.errors()
        ]
        said = "; ".join(f"{p['field']}: {p['reason']}" for p in problems)
        await audit_refusal(request, 422, f"malformed request: {said}")
        return _error(request, 422, "malformed request", problems)

    @app.middleware("http")
    async def _security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        started = time.monotonic()
        response = await call_next(request)
        # The route's template, not the path: one series per route, not one per remediation.
        route = getattr(request.scope.get("route"), "path", None) or "unmatched"
        request.app.state.metrics.http.labels(
            route, request.method, str(response.status_code)
        ).observe(time.monotonic() - started)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if not request.url.path.startswith(NO_STORE_EXEMPT):
            # History and tokens' answers must not linger in a shared or browser cache.
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    # Outermost: heartbeats that need no error answer skip the stack below (heartbeat_lane.py).
    app.add_middleware(
        HeartbeatLane, deps=deps, metrics=app.state.metrics, headers=SECURITY_HEADERS
    )
    app.include_router(make_api_router())
    app.include_router(make_dispositions_router())
    app.include_router(make_agents_router())
    app.include_router(
        make_signals_router(
            deps.inbox,
            dependencies=[Depends(require_pusher)],
            clock=deps.clock,
            max_age=timedelta(seconds=deps.settings.signals.push_max_age_seconds),
            event_max_age=timedelta(seconds=deps.settings.signals.push_event_max_age_seconds),
            on_refused=app.state.metrics.count_refused,
            admission=deps.admission,
            nodes=lambda names: deps.node_gpus(names),
        )
    )
    app.include_router(make_intake_router())
    app.include_router(make_fleet_breaker_router())
    app.include_router(make_racks_router())
    app.include_router(pages.make_pages_router())
    app.include_router(make_backtest_router())
    app.include_router(make_doctor_router())
    app.include_router(make_shadow_router())
    app.include_router(make_optouts_router())
    app.include_router(make_fences_router())
    app.include_router(make_hardware_router())
    app.include_router(make_planned_router())
    app.include_router(make_validations_router())
    app.include_router(make_rma_router())
    app.include_router(make_reliability_router())
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/api/docs", include_in_schema=False, response_class=HTMLResponse)
    def api_docs(request: Request) -> HTMLResponse:
        """Swagger UI from our own static files: works air-gapped, under the same CSP."""
        return pages.TEMPLATES.TemplateResponse(request, "api_docs.html", {})

    @app.get("/healthz", tags=["probes"])
    def healthz() -> HealthOut:
        """Alive: the process answers (no dependency is checked)."""
        return HealthOut(status="ok")

    @app.get("/readyz", tags=["probes"], responses={503: {"model": HealthOut}})
    def readyz(deps: Deps) -> Response:
        problems = readiness_problems(deps)
        body = HealthOut(
            status="unready" if problems else "ready",
            problems=problems,
            sources_down=sources_down(deps) if not problems else [],
        )
        return JSONResponse(body.model_dump(), 503 if problems else 200)

    @app.get("/metrics", tags=["probes"], response_class=PlainTextResponse)
    def metrics(deps: Deps) -> Response:
        deps.before_scrape()
        body = generate_latest(deps.registry) + deps.scrape_extra()
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    # Probes answer HEAD too (load balancers and uptime checkers use it); own operation ids.
    for path, probe, extra in (
        ("/healthz", healthz, {}),
        ("/readyz", readyz, {"responses": {503: {"model": HealthOut}}}),
        ("/metrics", metrics, {"response_class": PlainTextResponse}),
    ):
        app.add_api_route(
            path,
            probe,
            methods=["HEAD"],
            tags=["probes"],
            operation_id=f"head_{path.strip('/')}",
            **extra,
        )

    return app


def _allowed(request: Request) -> list[str]:
    """Every method some route takes at this path: Starlette's 405 names only the first route's,
    and one path may be served by several routers (GET and POST /api/v1/signals)."""
    scope = dict(request.scope)
    return sorted(
        {
            method
            for route in _api_routes(request.app.router.routes)
            if route.matches(scope)[0] == Match.PARTIAL
            for method in route.methods or ()
        }
    )


def _api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's included router
        if included is not None:
            yield from _api_routes(included.routes)
        elif isinstance(route, APIRoute):
            yield route
