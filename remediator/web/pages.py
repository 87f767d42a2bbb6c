"""The server-rendered pages: overview, list, detail, node, policies, runbooks, login.

Each page is one GET that a tired person can bookmark or paste into a chat; actions are small
POST forms carrying the CSRF token, answered with a redirect back to the page (so a reload never
repeats an action).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path as FilePath
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from remediator.model.states import TERMINAL, State
from remediator.policy.durations import parse_duration
from remediator.remediation import commands
from remediator.signals.model import SignalKind
from remediator.store.audit import AuditQuery
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.validations import validation_figures, validation_runs
from remediator.web import charts, console, csrf, sessions, views
from remediator.web.access import (
    Deps,
    Metrics,
    Reader,
    Texts,
    csrf_secret,
    principal_of,
    web_deps,
)
from remediator.web.api import (
    MAX_ID,
    NodeName,
    RemediationId,
    audit_rows,
    fetch_page,
    node_query,
)
from remediator.web.auth import SESSION_COOKIE, Principal, authenticate
from remediator.web.filters import parse_filters
from remediator.web.nodes import NodeQuery, node_out
from remediator.web.oncall import Asker, client_address, run_command, run_controller_command
from remediator.web.problems import WebError
from remediator.web.runbooks import Runbooks
from remediator.web.schemas import PRINTABLE

log = logging.getLogger(__name__)
TEMPLATES = Jinja2Templates(directory=FilePath(__file__).parent / "templates")
TEMPLATES.env.filters["duration"] = views.format_duration
TEMPLATES.env.filters["ago"] = views.relative
TEMPLATES.env.filters["utc"] = views.absolute
TEMPLATES.env.globals["tone"] = lambda state: views.STATE_TONE.get(State(state), "off")
TEMPLATES.env.globals["signal_value"] = views.signal_value
TEMPLATES.env.globals["states"] = [s.value for s in State]
TEMPLATES.env.globals["signal_kinds"] = [k.value for k in SignalKind]
CHART_DAYS = 14
# The newest successes the repair chart reads: enough for a steady p90, bounded on a busy fleet.
REPAIR_SAMPLE = 2_000
PAGE_SIZE = 50
WAITING_SHOWN = 50
SWITCHES_SHOWN = 5
Reason = Annotated[str, Form(max_length=500, pattern=PRINTABLE)]
DONE_MESSAGES = {
    "approve": "Approved: the engine quarantines the node on its next tick.",
    "cancel": "Cancelled: the engine releases the node on its next tick.",
    "retry": "Retrying the failed step.",
    "release": "Released: the remediation goes on.",
    "pause": "All automation is paused.",
    "resume": "Automation resumed.",
    "reset-breaker": "The storm breaker is reset.",
    "reset-fleet-breaker": "The fleet breaker is reset: every cluster may start new steps.",
}


# How many queued nodes the breaker banner names (the list page has them all).
BANNER_NODES = 50


def render(
    request: Request,
    template: str,
    principal: Principal | None,
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    deps = web_deps(request)
    secret = csrf_secret(request)
    controller = deps.repository.controller_status() if principal else None
    breaker_queued: tuple[RemediationRecord, ...] = ()
    if controller is not None and controller.breaker_tripped:
        queued = RemediationFilter(states=frozenset({State.QUEUED}))
        breaker_queued = deps.repository.list(queued, limit=BANNER_NODES).rows
    base = {
        "principal": principal,
        "csrf_token": csrf.token_for(secret) if secret and principal else "",
        "now": deps.clock.now(),
        "cluster": deps.settings.cluster_name,
        "controller": controller,
        "breaker_queued": breaker_queued,
        "banner_limit": BANNER_NODES,
        "sources_down": (
            [s for s in deps.repository.source_health() if not s.up] if principal else []
        ),
        "live": False,
        "done": DONE_MESSAGES.get(request.query_params.get("done", "")),
    }
    if context.get("live"):
        base["live_version"] = deps.repository.change_marker()
    return TEMPLATES.TemplateResponse(request, template, base | context, status_code=status)


def error_page(request: Request, status: int, reason: str) -> HTMLResponse:
    return render(request, "error.html", None, status=status, code=status, reason=reason)


# The repaired/replaced tiles count this far back (Repository.overview's closed window).
OUTCOME_WINDOW = timedelta(days=7)


def _list_url(states: Iterable[State], **params: str) -> str:
    query = [("state", s.value) for s in sorted(states)] + list(params.items())
    return "/remediations?" + urlencode(query)


def _safe_next(target: str | None) -> str:
    """Only a path on this site, so the login form cannot bounce someone elsewhere."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def make_pages_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/", response_class=HTMLResponse)
    def overview(request: Request, deps: Deps, principal: Reader) -> HTMLResponse:
        now = deps.clock.now()
        repo = deps.repository
        waiting = repo.list(RemediationFilter(states=views.NEEDS_HUMAN), limit=WAITING_SHOWN)
        working = repo.list(RemediationFilter(states=views.WORKING), limit=WAITING_SHOWN)
        days = chart_days(now.date(), CHART_DAYS)
        # One read for the summary's window and the charts' days, which begin inside it.
        spans = console.recent_spans(deps, now)
        chart_from = datetime.combine(days[0], time.min, UTC)
        lost = views.gpu_hours_lost([s for s in spans if s.quarantined_at >= chart_from], now)
        repair = repo.time_to_repair(since=now - timedelta(days=7), window=REPAIR_SAMPLE)
        active = deps.policies.active
        doa = validation_figures(
            validation_runs(repo.session_factory, repo.cluster, since=now - OUTCOME_WINDOW)
        ).overall
        return render(
            request,
            "overview.html",
            principal,
            summary=console.overview_out(deps, spans),
            waiting=[
                views.waiting_item(r, deps.node_known(r.node) is False)
                for r in repo.with_events(waiting.rows)
            ],
            waiting_more=_list_url(views.NEEDS_HUMAN) if waiting.next_cursor else None,
            foreign_fences=deps.fences.foreign() if deps.fences is not None else [],
            working=working.rows,
            working_more=_list_url(views.WORKING) if working.next_cursor else None,
            working_url=_list_url(views.WORKING),
            failed_url=_list_url(
                {State.FAILED}, finished_from=(now - timedelta(hours=24)).isoformat()
            ),
            repaired_url=_list_url(
                {State.SUCCEEDED},
                finished_from=(now - OUTCOME_WINDOW).isoformat(),
                outcome="repaired",
            ),
            replaced_url=_list_url(
                {State.SUCCEEDED},
                finished_from=(now - OUTCOME_WINDOW).isoformat(),
                outcome="replaced",
            ),
            per_day=charts.daily_by_kind(repo.daily_counts_by_kind(CHART_DAYS), days),
            outcomes=charts.daily_outcomes(repo.daily_counts_by_outcome(CHART_DAYS), days),
            lost=lost,
            days_shown=CHART_DAYS,
            lost_chart=charts.daily_stacked(
                lost.by_day,
                days,
                "GPU-hours out of service per day, by policy",
                "no node was taken out of service in this window",
                unit=" GPU-h",
            ),
            disrupted_chart=charts.daily_stacked(
                lost.disrupted_by_day,
                days,
                "GPU-hours of workload disrupted per day, by policy",
                "no remediation evicted a pod in this window",
                unit=" GPU-h",
            ),
            repair=charts.repair_times(repair.overall, repair.by_step),
            doa=doa,
            pool_limit=active.settings.max_unhealthy.per_pool if active else None,
            live=True,
            switches=audit_rows(
                request, AuditQuery(tuple(commands.CONTROLLER_COMMANDS), limit=SWITCHES_SHOWN)
            ),
        )

    @router.get("/remediations", response_class=HTMLResponse)
    def remediation_list(request: Request, deps: Deps, principal: Reader) -> HTMLResponse:
        params = {key: request.query_params.getlist(key) for key in request.query_params}
        parsed = parse_filters(params)
        cursor = request.query_params.get("cursor") or None
        page = fetch_page(deps, parsed.filters, cursor, PAGE_SIZE)
        next_url = None
        if page.next_cursor:
            kept = [(k, v) for k, values in params.items() if k != "cursor" for v in values]
            next_url = "/remediations?" + urlencode([*kept, ("cursor", page.next_cursor)])
        active = deps.policies.active
        return render(
            request,
            "list.html",
            principal,
            rows=page.rows,
            live=any(r.is_open for r in page.rows),
            parsed=parsed,
            next_url=next_url,
            first_url="/remediations?"
            + urlencode([(k, v) for k, values in params.items() if k != "cursor" for v in values]),
            paged=cursor is not None,
            order=request.query_params.get("order", "in_flight"),
            policy_names=[p.name for p in active.policies] if active else [],
        )

    @router.get("/remediations/{remediation_id}", response_class=HTMLResponse)
    def remediation_page(
        request: Request,
        deps: Deps,
        texts: Texts,
        principal: Reader,
        remediation_id: RemediationId,
    ) -> HTMLResponse:
        record = deps.repository.get(remediation_id)
        if record is None:
            raise WebError(404, f"remediation {remediation_id} not found")
        now = deps.clock.now()
        return render(
            request,
            "detail.html",
            principal,
            r=record,
            live=record.state not in TERMINAL,
            detail=console.remediation_detail(deps, texts, record, now),
            timeline=views.timeline(record, now),
            commands=(
                views.next_actions(record, deps.node_known(record.node) is False)
                if principal.can_act
                else []
            ),
            current_step=views.current_step(record),
            signal_rows=[
                (
                    s,
                    views.xid_explanation(s.code) if s.kind is SignalKind.XID else None,
                    console.runbook_url(views.signal_runbook(s)),
                )
                for s in record.signals
            ],
            detail_items=views.detail_items,
        )

    @router.post("/remediations/{remediation_id}/{command}")
    def remediation_command(
        ask: Asker,
        remediation_id: RemediationId,
        command: str,
        reason: Reason = "",
        cooldown: Annotated[str, Form(max_length=32)] = "",
        confirm: Annotated[str, Form(max_length=8)] = "",
    ) -> Response:
        if command not in commands.COMMANDS:
            raise WebError(404, f"no such command {command!r}")
        if command == "cancel" and confirm != "yes":
            raise WebError(422, "cancelling needs the confirmation box ticked")
        try:
            held_off = parse_duration(cooldown.strip()) if cooldown.strip() else None
        except ValueError as exc:
            raise WebError(422, f"cooldown: {exc}") from exc
        run_command(ask, command, remediation_id, reason.strip() or None, held_off)
        return RedirectResponse(f"/remediations/{remediation_id}?done={command}", 303)

    @router.post("/controller/{command}")
    def controller_command(
        ask: Asker,
        command: str,
        reason: Reason = "",
        drop_queued: Annotated[bool, Form()] = False,
    ) -> Response:
        if command not in commands.CONTROLLER_COMMANDS:
            raise WebError(404, f"no such command {command!r}")
        if not reason.strip():
            raise WebError(422, "say why: the reason is shown to everyone who sees the pause")
        run_controller_command(ask, command, reason.strip(), drop_queued)
        return RedirectResponse(f"/?done={command}", 303)

    @router.get("/nodes/{name}", response_class=HTMLResponse)
    def node_page(
        request: Request,
        deps: Deps,
        principal: Reader,
        name: NodeName,
        query: Annotated[NodeQuery, Depends(node_query)],
    ) -> HTMLResponse:
        node = node_out(deps, name, deps.clock.now(), query)
        here = [(k, v) for k, v in request.query_params.multi_items()]

        def more(key: str, cursor: str | None) -> str | None:
            if cursor is None:
                return None
            kept = [(k, v) for k, v in here if k != key]
            return f"/nodes/{name}?" + urlencode([*kept, (key, cursor)])

        return render(
            request,
            "node.html",
            principal,
            node=node,
            fence=next(
                (v for v in (deps.fences.views() if deps.fences else []) if v.node == name), None
            ),
            live=any(r.state not in TERMINAL for r in node.remediations),
            window_from=node.window_from.strftime("%Y-%m-%dT%H:%M"),
            window_to=node.window_to.strftime("%Y-%m-%dT%H:%M"),
            remediations_more=more("remediations_cursor", node.remediations_next),
            signals_more=more("signals_cursor", node.signals_next),
            paged=query.remediations_cursor is not None or query.signals_cursor is not None,
            first_url=f"/nodes/{name}?"
            + urlencode([(k, v) for k, v in here if not k.endswith("_cursor")]),
        )

    @router.get("/audit", response_class=HTMLResponse)
    def audit_page(
        request: Request,
        principal: Reader,
        command: Annotated[str | None, Query(max_length=32, pattern=r"^[a-z-]*$")] = None,
        remediation: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        before: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    ) -> HTMLResponse:
        rows = audit_rows(
            request, AuditQuery((command,) if command else (), remediation, before, PAGE_SIZE)
        )
        older = None
        if len(rows) == PAGE_SIZE:
            kept = [(k, v) for k, v in request.query_params.multi_items() if k != "before"]
            older = "/audit?" + urlencode([*kept, ("before", str(rows[-1].id))])
        return render(
            request,
            "audit.html",
            principal,
            rows=rows,
            command=command or "",
            commands=[*commands.COMMANDS, *commands.CONTROLLER_COMMANDS],
            older=older,
            paged=before is not None,
        )

    @router.get("/policies", response_class=HTMLResponse)
    def policies_page(request: Request, deps: Deps, principal: Reader) -> HTMLResponse:
        return render(
            request,
            "policies.html",
            principal,
            policies=console.policies_out(deps),
            latest=deps.repository.latest_policy_set(),
        )

    @router.get("/runbooks", response_class=HTMLResponse)
    @router.get("/runbooks/{slug}", response_class=HTMLResponse)
    def runbook_page(request: Request, slug: str = "") -> HTMLResponse:
        """Public on purpose: alerts link here, and a runbook holds no secret."""
        books: Runbooks = request.app.state.runbooks
        book = books.get(slug)
        if book is None:
            raise WebError(404, f"no runbook {slug!r}")
        return render(request, "runbook.html", principal_of(request), book=book)

    @router.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = "/") -> HTMLResponse:
        return render(request, "login.html", None, next=_safe_next(next), failed=False)

    @router.post("/login", response_model=None)
    def login(
        request: Request,
        deps: Deps,
        metrics: Metrics,
        token: Annotated[str, Form(max_length=4096)],
        name: Annotated[str, Form(max_length=200)] = "",
        next: Annotated[str, Form(max_length=2000)] = "/",
    ) -> Response:
        principal = authenticate(deps.settings.web, token.strip(), name=name)
        if principal is None or not principal.can_read:  # push-only tokens never log in
            metrics.auth_failures.labels("login").inc()
            log.warning(
                "console login refused from %s",
                client_address(request),
                extra={"source": client_address(request), "reason": "unknown token"},
            )
            return render(
                request, "login.html", None, status=401, next=_safe_next(next), failed=True
            )
        response = RedirectResponse(_safe_next(next), 303)
        sessions.open_session(request, response, principal, deps.settings.web)
        return response

    @router.post("/logout", dependencies=[Depends(_logout_guard)])
    def logout(request: Request, deps: Deps) -> Response:
        response = RedirectResponse("/login", 303)
        sessions.close_session(request, response, deps.settings.web)
        return response

    return router


async def _logout_guard(request: Request, principal: Reader) -> None:
    """Logging out is harmless but still needs the CSRF token, so no other site can do it."""
    if principal.via_cookie:
        form = await request.form()
        presented = form.get(csrf.FORM_FIELD)
        if not csrf.valid(
            request.cookies.get(SESSION_COOKIE, ""),
            presented if isinstance(presented, str) else None,
        ):
            raise WebError(403, "missing or wrong CSRF token")


def chart_days(today: date, count: int) -> list[date]:
    return [today - timedelta(days=count - 1 - i) for i in range(count)]
