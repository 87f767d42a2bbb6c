"""The fleet console: the same console over a shared database, for every cluster in it, with no
kubeconfig (`remediator console --config F`).

Cluster is a dimension of every request: the fleet's own pages (`/fleet`, `GET
/api/v1/clusters`, `GET /api/v1/fleet/waiting`) show every cluster the caller's token may see;
every other page and route is the per-cluster console for the cluster the request names
(`?cluster=NAME`, the remediation's own cluster for `/remediations/{id}…`, else the cluster
last chosen in this browser). A command is a database write, as from any replica: the leader
of that cluster's controller carries it out on its next advance tick (2 s); until it does the
remediation shows the command as its newest step, and a controller not seen for a while is
named on every page of its cluster.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, Field
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from remediator.clock import Clock, SystemClock
from remediator.errors import PolicyError
from remediator.model.cluster import name_problem
from remediator.policy.loader import PolicySet
from remediator.settings import Settings
from remediator.signals.model import Signal
from remediator.signals.sources.push import InboxUnavailable, SignalInbox
from remediator.store.audit import AuditLog
from remediator.store.db import make_session_factory
from remediator.store.fleet import ClusterFigures, FleetQueries
from remediator.store.fleet_breaker import FleetBreakerStore
from remediator.store.heartbeats import HeartbeatBook
from remediator.store.records import RemediationRecord
from remediator.store.repository import Repository
from remediator.web import pages
from remediator.web.access import Reader
from remediator.web.app import SECURITY_HEADERS, create_app
from remediator.web.auth import Principal
from remediator.web.deps import WebDeps
from remediator.web.fleet_breaker import FleetBreakerOut, breaker_out
from remediator.web.fleet_figures import make_figures_router
from remediator.web.pending import silence

log = logging.getLogger(__name__)

# The console's own rows (its login sessions) are kept under a name no cluster can have.
FLEET_SCOPE = "fleet:console"
CLUSTER_COOKIE = "remediator_cluster"
# Routes that are the fleet's, or no cluster's.
FLEET_PATHS = ("/fleet", "/api/v1/clusters", "/api/v1/fleet")
CLUSTERLESS_PATHS = (
    "/static/",
    "/login",
    "/logout",
    "/healthz",
    "/readyz",
    "/metrics",
    "/api/docs",
    "/api/v1/openapi.json",
    "/runbooks",
)
_BY_ID = re.compile(r"^(?:/api/v1)?/remediations/(\d{1,18})(?:/|$)")


class NoInbox(SignalInbox):
    """The fleet console decides nothing: signals go to each cluster's own controller."""

    def put(self, signals: Sequence[Signal]) -> int:
        raise InboxUnavailable(
            "the fleet console takes no signals: push to the cluster's own controller"
        )


@dataclass
class NoPolicies:
    """Policies load in each cluster's controller; the console shows the recorded sets."""

    active: PolicySet | None = None
    last_error: PolicyError | None = None


class Fleet:
    """Per-cluster deps over one shared engine, built on first use and kept."""

    def __init__(self, settings: Settings, engine: Engine, clock: Clock | None = None) -> None:
        self.settings = settings
        self.engine = engine
        self.clock: Clock = clock or SystemClock()
        self.session_factory = make_session_factory(engine)
        self.queries = FleetQueries(self.session_factory)
        self.breaker = FleetBreakerStore(self.session_factory, self.clock)
        self.registry = CollectorRegistry()
        self._policies = NoPolicies()
        self._inbox = NoInbox(capacity=1)
        self.base = self._deps(FLEET_SCOPE)
        self._per_cluster: dict[str, tuple[WebDeps, AuditLog]] = {}

    def _deps(self, cluster: str) -> WebDeps:
        repository = Repository(self.session_factory, cluster, self.clock)
        # The agents' figures as that cluster's controller wrote them: this book only reads.
        heartbeats = HeartbeatBook(
            repository,
            self.clock,
            silent_after=timedelta(seconds=self.settings.agent_silent_after_seconds),
            budget_per_second=self.settings.agents.heartbeat_budget_per_second,
        )
        return WebDeps(
            settings=self.settings.model_copy(update={"cluster_name": cluster}),
            repository=repository,
            policies=self._policies,
            inbox=self._inbox,
            registry=self.registry,
            clock=self.clock,
            heartbeats=heartbeats,
        )

    def for_cluster(self, cluster: str) -> tuple[WebDeps, AuditLog]:
        found = self._per_cluster.get(cluster)
        if found is None:
            found = (self._deps(cluster), AuditLog(self.session_factory, cluster, self.clock))
            self._per_cluster[cluster] = found
        return found

    def controller_silence(self, cluster: str, now: datetime) -> str | None:
        """Why commands on `cluster` are not being carried out, or None."""
        status = self.for_cluster(cluster)[0].repository.controller_status()
        return silence(cluster, status.leader_seen_at, now)


# -- the API's shapes ------------------------------------------------------------------------


class ClusterOut(BaseModel):
    name: str
    in_flight: int = Field(description="open and moving without a human; queued work is not")
    queued: int = Field(description="held back by a budget, a breaker (the fleet's) or a pause")
    waiting_for_human: int
    held: int
    failed_last_24h: int
    paused: bool
    breaker: str = Field(description="the cluster's own storm breaker: closed or tripped")
    breaker_reason: str | None
    fleet_breaker_holds: bool = Field(
        description="the cluster takes part in the fleet breaker, which is tripped: it queues "
        "every new remediation whatever its own breaker says"
    )
    controller: str | None
    controller_seen_at: datetime | None
    controller_seen_seconds_ago: float | None
    controller_problem: str | None
    sources_down: list[str]
    registered: bool
    pending_command: str | None = Field(
        default=None,
        description="a pause, resume or breaker reset the cluster's controller has not been "
        "seen since (it carries it out on its next cycle)",
    )


class ClustersOut(BaseModel):
    items: list[ClusterOut]
    fleet_breaker: FleetBreakerOut


class WaitingOut(BaseModel):
    cluster: str
    id: int
    node: str
    pool: str | None
    state: str
    reason: str
    hold_reason: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    waiting_seconds: float


class FleetWaitingOut(BaseModel):
    items: list[WaitingOut]


def cluster_out(figures: ClusterFigures, now: datetime) -> ClusterOut:
    seen = figures.leader_seen_at
    return ClusterOut(
        name=figures.cluster,
        in_flight=figures.in_flight,
        queued=figures.queued,
        waiting_for_human=figures.waiting_for_human,
        held=figures.held,
        failed_last_24h=figures.failed,
        paused=figures.paused,
        breaker="tripped" if figures.breaker_tripped else "closed",
        breaker_reason=figures.breaker_reason,
        fleet_breaker_holds=figures.fleet_breaker_holds,
        controller=figures.leader_identity,
        controller_seen_at=seen,
        controller_seen_seconds_ago=(now - seen).total_seconds() if seen else None,
        controller_problem=silence(figures.cluster, seen, now),
        sources_down=list(figures.sources_down),
        registered=figures.registered,
        pending_command=cluster_pending(figures, now),
    )


def cluster_pending(figures: ClusterFigures, now: datetime) -> str | None:
    """A cluster-wide command waits until its controller is seen after it."""
    at, seen = figures.last_command_at, figures.leader_seen_at
    if at is None or figures.last_command is None or (seen is not None and seen > at):
        return None
    waited = int(max(0.0, (now - at).total_seconds()))
    return (
        f"{figures.last_command} by {figures.last_command_by or 'someone'} {waited} s ago: "
        f"waiting for the controller of cluster {figures.cluster}"
    )


def waiting_out(record: RemediationRecord, now: datetime) -> WaitingOut:
    return WaitingOut(
        cluster=record.cluster,
        id=record.id,
        node=record.node,
        pool=record.pool,
        state=record.state.value,
        reason=record.reason,
        hold_reason=record.hold_reason,
        error=record.error,
        created_at=record.created_at,
        updated_at=record.updated_at,
        waiting_seconds=max(0.0, (now - record.updated_at).total_seconds()),
    )


def visible_to(principal: Principal) -> frozenset[str] | None:
    return principal.clusters


# -- routes ----------------------------------------------------------------------------------


def make_fleet_router(fleet: Fleet) -> APIRouter:
    router = APIRouter()

    @router.get("/api/v1/clusters", tags=["fleet"])
    def list_clusters(principal: Reader) -> ClustersOut:
        """Every cluster of the shared database your token may see, with its figures."""
        now = fleet.clock.now()
        figures = fleet.queries.figures(now, visible_to(principal))
        return ClustersOut(
            items=[cluster_out(f, now) for f in figures],
            fleet_breaker=breaker_out(fleet.breaker.status()),
        )

    @router.get("/api/v1/fleet/waiting", tags=["fleet"])
    def fleet_waiting(principal: Reader) -> FleetWaitingOut:
        """What waits for a human in any cluster you may see, most urgent first: held steps,
        approvals, the last day's failures, then opt-out holds; oldest first within each."""
        now = fleet.clock.now()
        rows = fleet.queries.waiting(now, visible_to(principal))
        return FleetWaitingOut(items=[waiting_out(r, now) for r in rows])

    @router.get("/fleet", response_class=HTMLResponse, include_in_schema=False)
    def fleet_page(request: Request, principal: Reader) -> HTMLResponse:
        now = fleet.clock.now()
        visible = visible_to(principal)
        figures = [cluster_out(f, now) for f in fleet.queries.figures(now, visible)]
        waiting = [waiting_out(r, now) for r in fleet.queries.waiting(now, visible)]
        return pages.render(
            request,
            "fleet.html",
            principal,
            figures_url="/fleet/figures",
            cluster="fleet",
            controller=None,
            sources_down=[],
            clusters=figures,
            waiting=waiting,
            fleet_breaker_state=fleet.breaker.status(),
            may_reset_fleet=principal.can_act and principal.clusters is None,
        )

    return router


# -- choosing the cluster of a request -------------------------------------------------------


def _refusal(request: Request, status: int, reason: str) -> Response:
    if request.url.path.startswith("/api/"):
        response: Response = JSONResponse({"reason": reason, "detail": None}, status)
    else:
        response = pages.error_page(request, status, reason)
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def install_cluster_choice(app: FastAPI, fleet: Fleet) -> None:
    @app.middleware("http")
    async def _choose_cluster(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        request.state.cluster = None
        path = request.url.path
        if path.startswith(FLEET_PATHS) or path.startswith(CLUSTERLESS_PATHS):
            return await _guarded(request, call_next)
        chosen = request.query_params.get("cluster")
        cluster = chosen
        try:
            if cluster is None and (match := _BY_ID.match(path)):
                cluster = await run_in_threadpool(fleet.queries.cluster_of, int(match[1]))
            if cluster is None:
                cluster = request.cookies.get(CLUSTER_COOKIE)
            if cluster is None:
                if path == "/":
                    return RedirectResponse("/fleet", 303)
                return _refusal(
                    request,
                    400,
                    "which cluster? add ?cluster=NAME (GET /api/v1/clusters lists them)",
                )
            problem = name_problem(cluster)
            if problem is not None:
                return _refusal(request, 400, problem)
            known = await run_in_threadpool(fleet.queries.clusters)
        except (OperationalError, InterfaceError) as exc:
            return _database_down(request, exc)
        if cluster not in known:
            return _refusal(request, 404, f"no cluster named {cluster} in this database")
        request.state.cluster = cluster
        request.state.deps, request.state.audit = fleet.for_cluster(cluster)
        response = await _guarded(request, call_next)
        if chosen is not None and request.method == "GET" and not path.startswith("/api/"):
            response.set_cookie(CLUSTER_COOKIE, cluster, httponly=True, samesite="strict")
        return response


Next = Callable[[Request], Awaitable[Response]]


async def _guarded(request: Request, call_next: Next) -> Response:
    """A database that cannot answer is said so, never shown as empty lists."""
    try:
        return await call_next(request)
    except (OperationalError, InterfaceError) as exc:
        return _database_down(request, exc)


def _database_down(request: Request, exc: SQLAlchemyError) -> Response:
    log.warning("fleet console: database down: %s", exc.__class__.__name__)
    return _refusal(
        request, 503, f"database down ({exc.__class__.__name__}): the fleet cannot be shown"
    )


def create_fleet_app(fleet: Fleet) -> FastAPI:
    app = create_app(fleet.base)
    app.state.fleet_console = True
    app.state.fleet = fleet
    app.include_router(make_fleet_router(fleet))
    app.include_router(make_figures_router(fleet))
    install_cluster_choice(app, fleet)
    return app


def banner(request: Request, now: datetime) -> str | None:
    """The per-cluster pages' line when the chosen cluster's controller is silent."""
    fleet: Any = getattr(request.app.state, "fleet", None)
    cluster = getattr(request.state, "cluster", None)
    if fleet is None or cluster is None:
        return None
    found: str | None = fleet.controller_silence(cluster, now)
    return found


pages.TEMPLATES.env.globals["fleet_banner"] = banner
