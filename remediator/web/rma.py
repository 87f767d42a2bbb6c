"""RMA cases in the console and the API (docs/rma.md): `GET /api/v1/rma[?status=&cluster=]`,
`GET /api/v1/rma/{id}`, its evidence bundle as one tar.gz (`GET /api/v1/rma/{id}/bundle`), and
`PATCH /api/v1/rma/{id}` for the ticket system or a person to move a case forward or note
something on it. `{id}` is the case's number or the GPU's UUID (what a vendor's ticket carries):
the GPU's case not closed yet.

Reading needs any token that may see the case's cluster, moving an operator; every move and note
and every refused one (a reader's token, an unknown case, another cluster's, a move back) is
audited."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from remediator.errors import NotFoundError
from remediator.rma import bundle
from remediator.rma.book import AUDIT_COMMAND, RmaBook
from remediator.rma.book import Asker as BookAsker
from remediator.rma.model import MoveRefused, RmaCase, RmaStatus, age_text
from remediator.web.access import Deps, Reader, require_reader
from remediator.web.auth import Principal
from remediator.web.deps import WebDeps
from remediator.web.oncall import Asked, asker_for, record_command
from remediator.web.pages import render
from remediator.web.problems import ERRORS, WebError
from remediator.web.schemas import SAID

# A case number, or a GPU UUID as nvidia-smi and DCGM print it.
CASE_REF = r"^([1-9][0-9]{0,17}|GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})$"
CaseRef = Annotated[
    str,
    Path(
        min_length=1,
        max_length=40,
        pattern=CASE_REF,
        description="the case number, or the GPU's UUID (its case not closed yet)",
    ),
]
CLUSTER = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
ARCHIVE = "application/gzip"


class RmaCaseOut(BaseModel):
    id: int
    cluster: str
    target: str = Field(description="gpu or machine")
    hardware_id: str = Field(description="the GPU's UUID or the machine's id")
    node: str
    gpu_index: int | None
    remediation_id: int | None
    status: RmaStatus
    reason: str
    opened_at: datetime
    updated_at: datetime
    age_seconds: float
    history: list[dict[str, Any]]
    webhook: str = Field(description="none, pending or delivered")
    webhook_attempts: int
    webhook_error: str | None

    @classmethod
    def of(cls, case: RmaCase, now: datetime) -> RmaCaseOut:
        return cls(
            id=case.id,
            cluster=case.cluster,
            target=case.target.value,
            hardware_id=case.hardware_id,
            node=case.node,
            gpu_index=case.gpu_index,
            remediation_id=case.remediation_id,
            status=case.status,
            reason=case.reason,
            opened_at=case.opened_at,
            updated_at=case.updated_at,
            age_seconds=case.age_seconds(now),
            history=list(case.history),
            webhook=case.webhook_state,
            webhook_attempts=case.webhook_attempts,
            webhook_error=case.webhook_error,
        )


class RmaListOut(BaseModel):
    items: list[RmaCaseOut]


class RmaMoveIn(BaseModel):
    """A move, a note, or both; a note alone is a history line of its own."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["status"], "properties": {"status": {"not": {"type": "null"}}}},
                {"required": ["note"], "properties": {"note": {"type": "string"}}},
            ]
        },
    )

    status: RmaStatus | None = Field(
        default=None, description="forward only: opened → acknowledged → shipped → …"
    )
    note: str | None = Field(default=None, min_length=1, max_length=500, pattern=SAID)

    @model_validator(mode="after")
    def _says_something(self) -> RmaMoveIn:
        if self.status is None and self.note is None:
            raise ValueError("give a status, a note or both")
        return self


class RmaMoveOut(RmaCaseOut):
    changed: bool = Field(
        description="false: the case had this status already and no new note (a duplicate)"
    )


MoveAsker = Annotated[Asked, Depends(asker_for(AUDIT_COMMAND))]
MOVE_ERRORS = {**ERRORS, 409: {**ERRORS[409], "description": "a move back"}}


def book_of(deps: WebDeps) -> RmaBook:
    return RmaBook(deps.repository.session_factory, deps.settings.cluster_name, deps.clock)


def find(deps: WebDeps, principal: Principal, ref: str) -> RmaCase:
    """The case a reference names, if this token may see its cluster; 404 with the reason."""
    book = book_of(deps)
    if ref.startswith("GPU-"):
        case = book.open_case_of(ref)
        if case is None:
            raise WebError(404, f"no RMA case open for GPU {ref}")
    else:
        try:
            case = book.get(int(ref))
        except NotFoundError as exc:
            raise WebError(404, str(exc)) from exc
    if not principal.may_see(case.cluster):
        raise WebError(403, f"your token is not for cluster {case.cluster}")
    return case


def listed(
    deps: WebDeps, principal: Principal, status: RmaStatus | None, cluster: str | None
) -> tuple[RmaCase, ...]:
    if cluster is not None and not principal.may_see(cluster):
        raise WebError(403, f"your token is not for cluster {cluster}")
    clusters = {cluster} if cluster is not None else principal.clusters
    return book_of(deps).list(status=status, clusters=clusters)


def move(ask: Asked, ref: str, body: RmaMoveIn) -> tuple[RmaCase, bool]:
    """Move or note a case; a refusal (unknown case, another cluster's, a move back) is
    audited like the move, then answered."""

    def refused(detail: str, remediation_id: int | None, outcome: str = "refused") -> None:
        record_command(
            ask, AUDIT_COMMAND, outcome, body.note, remediation_id, detail, f"rma case {ref}"
        )

    try:
        case = find(ask.deps, ask.principal, ref)
    except WebError as exc:
        refused(f"case {ref}: {exc.reason}", None, "not_found" if exc.status == 404 else "refused")
        raise
    asker = BookAsker(ask.principal.actor, ask.source, ask.principal.fingerprint)
    try:
        return book_of(ask.deps).move(case.id, body.status, asker=asker, note=body.note)
    except MoveRefused as exc:
        refused(f"case {case.id}: {exc}", case.remediation_id)
        raise WebError(409, str(exc)) from exc


def make_rma_router() -> APIRouter:
    router = APIRouter()
    api = APIRouter(prefix="/api/v1", tags=["rma"], responses=ERRORS)

    @api.get("/rma", dependencies=[Depends(require_reader)])
    def list_rma(
        deps: Deps,
        principal: Reader,
        status: RmaStatus | None = None,
        cluster: Annotated[str | None, Query(max_length=63, pattern=CLUSTER)] = None,
    ) -> RmaListOut:
        """RMA cases, newest first, of the clusters this token may see."""
        now = deps.clock.now()
        return RmaListOut(
            items=[RmaCaseOut.of(c, now) for c in listed(deps, principal, status, cluster)]
        )

    @api.get("/rma/{ref}")
    def get_rma(deps: Deps, principal: Reader, ref: CaseRef) -> RmaCaseOut:
        """One case with its history of moves."""
        return RmaCaseOut.of(find(deps, principal, ref), deps.clock.now())

    @api.get(
        "/rma/{ref}/bundle",
        response_class=Response,
        responses={200: {"content": {ARCHIVE: {}}, "description": "the evidence bundle"}},
    )
    def get_rma_bundle(deps: Deps, principal: Reader, ref: CaseRef) -> Response:
        """The evidence bundle as one tar.gz: a JSON or text file per part."""
        case = find(deps, principal, ref)
        return Response(
            bundle.archive(case.bundle),
            media_type=ARCHIVE,
            headers={"content-disposition": f'attachment; filename="rma-{case.id}.tar.gz"'},
        )

    @api.patch("/rma/{ref}", responses=MOVE_ERRORS)
    def patch_rma(ask: MoveAsker, ref: CaseRef, body: Annotated[RmaMoveIn, Body()]) -> RmaMoveOut:
        """Move a case forward and/or note something on it; the status it has already with no
        new note is a no-op (`changed` false)."""
        case, changed = move(ask, ref, body)
        out = RmaCaseOut.of(case, ask.deps.clock.now())
        return RmaMoveOut(**out.model_dump(), changed=changed)

    @router.get("/rma", response_class=HTMLResponse, include_in_schema=False)
    def rma_page(
        request: Request,
        deps: Deps,
        principal: Reader,
        status: RmaStatus | None = None,
    ) -> HTMLResponse:
        now = deps.clock.now()
        cases = listed(deps, principal, status, None)
        return render(
            request,
            "rma.html",
            principal,
            cases=[(c, age_text(c.age_seconds(now))) for c in cases],
            statuses=list(RmaStatus),
            current=status,
        )

    @router.get("/rma/{ref}", response_class=HTMLResponse, include_in_schema=False)
    def rma_case_page(
        request: Request, deps: Deps, principal: Reader, ref: CaseRef
    ) -> HTMLResponse:
        case = find(deps, principal, ref)
        return render(
            request,
            "rma_case.html",
            principal,
            case=case,
            age=age_text(case.age_seconds(deps.clock.now())),
            parts=bundle.PARTS,
        )

    router.include_router(api)
    return router
