"""The JSON API under /api/v1: the same history and the same commands as the pages.

Reads need any valid token, commands an operator token. Errors are JSON `{"reason": …}` with 400
(a body that cannot be read), 401, 403, 404, 409 (the state does not allow it) or 422 (a request
the schema refuses: the schema states every rule a request is checked against, cursors included).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request

from remediator.model.states import State
from remediator.remediation import commands
from remediator.signals import bounds
from remediator.signals.model import SignalKind
from remediator.store.audit import MAX_AUDIT_PAGE, AuditQuery, AuditRecord
from remediator.store.records import RemediationFilter
from remediator.web import console
from remediator.web.access import Deps, Texts, audit_log, require_reader
from remediator.web.filters import MAX_INT
from remediator.web.nodes import NODE_PAGE, NodeQuery, node_out
from remediator.web.oncall import Asker, run_command, run_controller_command
from remediator.web.paging import MAX_ID, fetch_page
from remediator.web.problems import ERRORS, WebError
from remediator.web.query import ListCursor, PositionCursor, QueryTime
from remediator.web.schemas import (
    PRINTABLE,
    AuditOut,
    AuditPageOut,
    CancelIn,
    CommandIn,
    ControllerCommandIn,
    ControllerOut,
    LiveOut,
    NodeOut,
    OverviewOut,
    PoliciesOut,
    RemediationDetailOut,
    RemediationOut,
    RemediationPageOut,
    ResetBreakerIn,
)

# A Kubernetes node name, checked where it enters (the same bound signals keep).
NODE_NAME = f"^{bounds.NODE_NAME.pattern}$"
RemediationId = Annotated[int, Path(ge=1, le=MAX_ID)]
Text = Annotated[str | None, Query(max_length=253, pattern=PRINTABLE)]
NodeName = Annotated[
    str, Path(max_length=253, pattern=NODE_NAME, description="a Kubernetes node name")
]


def _utc(value: datetime | None, name: str) -> datetime | None:
    """Naive means UTC; a time that does not exist in UTC (year 1 at +14:00) is refused."""
    if value is None:
        return None
    try:
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    except OverflowError as exc:
        raise WebError(422, f"{name}: {value.isoformat()} is out of range") from exc


def audit_rows(request: Request, query: AuditQuery) -> tuple[AuditRecord, ...]:
    return audit_log(request).list(query)


def node_query(
    window_from: Annotated[QueryTime | None, Query(alias="from")] = None,
    window_to: Annotated[QueryTime | None, Query(alias="to")] = None,
    remediations_cursor: ListCursor = None,
    signals_cursor: PositionCursor = None,
    limit: Annotated[int, Query(ge=1, le=500)] = NODE_PAGE,
) -> NodeQuery:
    return NodeQuery(window_from, window_to, remediations_cursor, signals_cursor, limit)


def list_filters(
    node: Annotated[str | None, Query(max_length=253, pattern=NODE_NAME)] = None,
    q: Annotated[
        str | None, Query(max_length=253, pattern=PRINTABLE, description="substring of node")
    ] = None,
    pool: Text = None,
    state: Annotated[list[State] | None, Query()] = None,
    signal_kind: SignalKind | None = None,
    xid: Annotated[int | None, Query(ge=0, le=MAX_INT)] = None,
    policy: Text = None,
    created_from: QueryTime | None = None,
    created_to: QueryTime | None = None,
    dry_run: bool | None = None,
    in_flight_first: bool = True,
    finished_from: Annotated[
        QueryTime | None, Query(description="finished (succeeded, failed, cancelled) since")
    ] = None,
    outcome: Annotated[
        Literal["repaired", "replaced"] | None, Query(description="how a success ended")
    ] = None,
) -> RemediationFilter:
    return RemediationFilter(
        node=node,
        node_search=q,
        pool=pool,
        states=frozenset(state or ()),
        signal_kind=signal_kind.value if signal_kind else None,
        xid_code=xid,
        policy=policy,
        created_from=_utc(created_from, "created_from"),
        created_to=_utc(created_to, "created_to"),
        dry_run=dry_run,
        in_flight_first=in_flight_first,
        finished_from=_utc(finished_from, "finished_from"),
        outcome=outcome,
    )


def make_api_router() -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["console"], responses=ERRORS)

    @router.get("/remediations", dependencies=[Depends(require_reader)])
    def list_remediations(
        deps: Deps,
        filters: Annotated[RemediationFilter, Depends(list_filters)],
        cursor: ListCursor = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> RemediationPageOut:
        """Newest first, in-flight ones on top unless `in_flight_first=false`; follow
        `next_cursor` for the next page."""
        page = fetch_page(deps, filters, cursor, limit)
        now = deps.clock.now()
        return RemediationPageOut(
            items=[console.remediation_out(r, now) for r in page.rows],
            next_cursor=page.next_cursor,
        )

    @router.get("/remediations/{remediation_id}", dependencies=[Depends(require_reader)])
    def get_remediation(
        deps: Deps, texts: Texts, remediation_id: RemediationId
    ) -> RemediationDetailOut:
        record = deps.repository.get(remediation_id)
        if record is None:
            raise WebError(404, f"remediation {remediation_id} not found")
        return console.remediation_detail(deps, texts, record, deps.clock.now())

    @router.get("/nodes/{name}", dependencies=[Depends(require_reader)])
    def get_node(
        deps: Deps, name: NodeName, query: Annotated[NodeQuery, Depends(node_query)]
    ) -> NodeOut:
        """The node now (from the cluster), its remediations and signals within the window
        (default: the last 7 days), each paged, and whether it is a repeat offender."""
        return node_out(deps, name, deps.clock.now(), query)

    @router.get("/policies", dependencies=[Depends(require_reader)])
    def get_policies(deps: Deps) -> PoliciesOut:
        return console.policies_out(deps)

    @router.get("/overview", dependencies=[Depends(require_reader)])
    def get_overview(deps: Deps) -> OverviewOut:
        return console.overview_out(deps)

    @router.get("/live", dependencies=[Depends(require_reader)])
    def get_live(deps: Deps) -> LiveOut:
        """What the console's pages poll: when `version` changes, a page may be stale."""
        return LiveOut(version=deps.repository.change_marker())

    @router.get("/controller", dependencies=[Depends(require_reader)])
    def get_controller(deps: Deps) -> ControllerOut:
        return ControllerOut.of(deps.repository.controller_status())

    @router.get("/audit", dependencies=[Depends(require_reader)])
    def get_audit(
        request: Request,
        command: Annotated[str | None, Query(max_length=32, pattern=r"^[a-z-]+$")] = None,
        remediation_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        before: Annotated[
            int | None, Query(ge=1, le=MAX_ID, description="id of the last row seen")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_PAGE)] = 100,
    ) -> AuditPageOut:
        """Every human command, newest first, done or refused: who, token id, from where, why."""
        rows = audit_rows(
            request, AuditQuery((command,) if command else (), remediation_id, before, limit)
        )
        return AuditPageOut(
            items=[AuditOut.model_validate(r) for r in rows],
            next_before=rows[-1].id if len(rows) == limit else None,
        )

    for name in commands.COMMANDS:
        router.add_api_route(
            f"/remediations/{{remediation_id}}/{name}",
            _remediation_command(name),
            methods=["POST"],
            name=f"{name}_remediation",
            summary=f"{name.capitalize()} a remediation",
        )
    for name in commands.CONTROLLER_COMMANDS:
        router.add_api_route(
            f"/controller/{name}",
            _controller_command(name),
            methods=["POST"],
            name=f"{name.replace('-', '_')}_controller",
            summary=f"{name.replace('-', ' ').capitalize()} (all automation)",
        )
    return router


def _remediation_command(name: str) -> Callable[..., RemediationOut]:
    """Each command's body declares only what it takes: a cooldown is cancel's alone."""
    if name == "cancel":

        def cancel(
            ask: Asker,
            remediation_id: RemediationId,
            body: Annotated[CancelIn | None, Body()] = None,
        ) -> RemediationOut:
            reason, cooldown = (body.reason, body.cooldown) if body else (None, None)
            record = run_command(ask, name, remediation_id, reason, cooldown)
            return console.remediation_out(record, ask.deps.clock.now())

        run = cancel
    else:

        def other(
            ask: Asker,
            remediation_id: RemediationId,
            body: Annotated[CommandIn | None, Body()] = None,
        ) -> RemediationOut:
            record = run_command(ask, name, remediation_id, body.reason if body else None)
            return console.remediation_out(record, ask.deps.clock.now())

        run = other
    run.__doc__ = commands.COMMANDS[name][0].__doc__
    return run


def _controller_command(name: str) -> Callable[..., ControllerOut]:
    """drop_queued is reset-breaker's alone."""
    if name == "reset-breaker":

        def reset(ask: Asker, body: ResetBreakerIn) -> ControllerOut:
            return ControllerOut.of(
                run_controller_command(ask, name, body.reason, body.drop_queued)
            )

        run = reset
    else:

        def other(ask: Asker, body: ControllerCommandIn) -> ControllerOut:
            return ControllerOut.of(run_controller_command(ask, name, body.reason))

        run = other
    run.__doc__ = commands.CONTROLLER_COMMANDS[name].__doc__
    return run
