"""Opt-outs in the console and the API (docs/optouts.md): `GET/POST /api/v1/optouts`,
`DELETE /api/v1/optouts/{id}`, and the /optouts page with its forms. Reading needs any token,
adding and removing an operator (cookie forms carry the CSRF token). Every add and removal is
audited by the book in the same transaction; a refused request writes nothing.

The page also shows the opt-out labels that hold a remediation now, as "label, no expiry, set
since T" with their age, from the facts the opt-out check recorded when the hold began.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from remediator.errors import NotFoundError
from remediator.model.optout import (
    DEFAULT_MAX_OPT_OUT,
    LabelHold,
    OptOutRecord,
    OptOutRefused,
    Target,
    label_hold,
    parse_target,
    span,
)
from remediator.model.states import State
from remediator.policy.durations import parse_duration
from remediator.store.optouts import Asker as OptOutAsker
from remediator.store.optouts import OptOutBook
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.web.access import Deps, Reader, require_reader
from remediator.web.deps import WebDeps
from remediator.web.oncall import Asked, asker_for
from remediator.web.pages import render
from remediator.web.paging import MAX_ID
from remediator.web.problems import ERRORS, WebError
from remediator.web.schemas import PRINTABLE

# Lenient DNS-1123 shapes (model/optout.py checks the same): a name that matches no pod or node
# only protects nothing.
_NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
NODE_TARGET = f"^{_NAME}$"
POD_TARGET = f"^[a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?/{_NAME}$"
JOB_TARGET = r"^[0-9]{1,10}([_+][0-9]{1,10})?$"
# Every match lasts at least a second: no component may be zero.
LASTING = r"^([1-9][0-9]{0,3}d)?([1-9][0-9]{0,3}h)?([1-9][0-9]{0,5}m)?([1-9][0-9]{0,6}s)?$"
# One line with at least one visible character.
REASON = r"^[^\x00-\x1f\x7f]*[^\x00-\x20\x7f][^\x00-\x1f\x7f]*$"
OptOutId = Annotated[int, Path(ge=1, le=MAX_ID)]
HELD_SHOWN = 200


class OptOutOut(BaseModel):
    id: int
    cluster: str
    scope: Literal["node", "pod", "slurm_job"]
    target: str
    by: str = Field(description="who asked")
    reason: str
    since: datetime
    until: datetime
    state: Literal["active", "expired", "removed"]
    removed_at: datetime | None = None
    removed_by: str | None = None

    @classmethod
    def of(cls, record: OptOutRecord, now: datetime) -> OptOutOut:
        return cls(
            id=record.id,
            cluster=record.cluster,
            scope=record.scope.value,
            target=record.target,
            by=record.actor,
            reason=record.reason,
            since=record.since,
            until=record.until,
            state=record.state(now),
            removed_at=record.removed_at,
            removed_by=record.removed_by,
        )


class LabelHoldOut(BaseModel):
    remediation_id: int
    node: str
    pod: str
    since: datetime | None = Field(description="when the label was set, as far as is known")
    since_from: Literal["managedFields", "creation time", "unknown"]
    age: str | None


class OptOutPageOut(BaseModel):
    items: list[OptOutOut]
    labels: list[LabelHoldOut] = Field(
        description="opt-out labels holding a remediation now: no owner, no expiry"
    )


class _OptOutIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    until: str = Field(
        min_length=2, max_length=32, pattern=LASTING, description="how long: 6h, 2d, 90m, 5s"
    )
    reason: str = Field(min_length=1, max_length=500, pattern=REASON)


class NodeOptOutIn(_OptOutIn):
    scope: Literal["node"]
    target: str = Field(max_length=253, pattern=NODE_TARGET, description="a node name")


class PodOptOutIn(_OptOutIn):
    scope: Literal["pod"]
    target: str = Field(max_length=317, pattern=POD_TARGET, description="NAMESPACE/NAME")


class JobOptOutIn(_OptOutIn):
    scope: Literal["slurm_job"]
    target: str = Field(max_length=21, pattern=JOB_TARGET, description="a Slurm job id")


OptOutIn = Annotated[NodeOptOutIn | PodOptOutIn | JobOptOutIn, Field(discriminator="scope")]
REFUSED = {
    **ERRORS,
    409: {**ERRORS[409], "description": "longer than the policy set's max_opt_out allows"},
}


def book_of(deps: WebDeps) -> OptOutBook:
    return OptOutBook(deps.repository.session_factory, deps.settings.cluster_name, deps.clock)


def longest(deps: WebDeps) -> timedelta:
    active = deps.policies.active
    return active.settings.max_opt_out if active is not None else DEFAULT_MAX_OPT_OUT


# Audited under the names the opt-out book writes when it is done.
AddAsker = Annotated[Asked, Depends(asker_for("optout-add"))]
RemoveAsker = Annotated[Asked, Depends(asker_for("optout-remove"))]


def _asker(ask: Asked) -> OptOutAsker:
    return OptOutAsker(ask.principal.actor, ask.source, ask.principal.fingerprint)


def add_opt_out(ask: Asked, target: Target, lasting: timedelta, reason: str) -> OptOutRecord:
    """OptOutRefused for a bad request (422), WebError 409 beyond max_opt_out."""
    allowed = longest(ask.deps)
    if lasting > allowed:
        raise WebError(
            409,
            f"an opt-out may last at most {span(allowed)} (max_opt_out); {span(lasting)} asked",
        )
    return book_of(ask.deps).add(
        target, lasting=lasting, reason=reason, asker=_asker(ask), longest=allowed
    )


def remove_opt_out(ask: Asked, opt_out_id: int, reason: str | None) -> OptOutRecord:
    try:
        return book_of(ask.deps).remove(opt_out_id, asker=_asker(ask), reason=reason)
    except NotFoundError as exc:
        raise WebError(404, str(exc)) from exc
    except OptOutRefused as exc:
        raise WebError(409, str(exc)) from exc


@dataclass(frozen=True)
class HeldByLabel:
    remediation: RemediationRecord
    hold: LabelHold


def label_holds(deps: WebDeps) -> list[HeldByLabel]:
    """The labels that hold open remediations, as the opt-out check saw them at the hold."""
    repo = deps.repository
    held = repo.list(
        RemediationFilter(states=frozenset({State.HELD_BY_OPT_OUT})), limit=HELD_SHOWN
    ).rows
    found: list[HeldByLabel] = []
    for record in repo.with_events(held):
        entry = next((e for e in reversed(record.events) if e.to_state is record.state), None)
        since = (entry.detail.get("label_since") if entry else None) or {}
        for pod, seen in sorted(since.items()):
            at = seen.get("since") if isinstance(seen, dict) else None
            when = datetime.fromisoformat(at) if isinstance(at, str) else None
            source = seen.get("from") if isinstance(seen, dict) else None
            hold = (
                label_hold(pod, when, None)
                if source == "managedFields"
                else label_hold(pod, None, when)
            )
            found.append(HeldByLabel(record, hold))
    return found


def page_out(deps: WebDeps, ended: bool) -> OptOutPageOut:
    now = deps.clock.now()
    return OptOutPageOut(
        items=[OptOutOut.of(r, now) for r in book_of(deps).list(ended=ended)],
        labels=[
            LabelHoldOut(
                remediation_id=h.remediation.id,
                node=h.remediation.node,
                pod=h.hold.pod,
                since=h.hold.since,
                since_from=h.hold.source,
                age=h.hold.age(now),
            )
            for h in label_holds(deps)
        ],
    )


def make_optouts_router() -> APIRouter:
    router = APIRouter()
    api = APIRouter(prefix="/api/v1", tags=["console"], responses=ERRORS)

    @api.get("/optouts", dependencies=[Depends(require_reader)])
    def list_optouts(
        deps: Deps,
        ended: Annotated[bool, Query(alias="all", description="also removed and expired")] = False,
    ) -> OptOutPageOut:
        """Recorded opt-outs (newest first) and the labels holding a remediation now."""
        return page_out(deps, ended)

    @api.post("/optouts", status_code=201, responses=REFUSED)
    def post_optout(ask: AddAsker, body: Annotated[OptOutIn, Body()]) -> OptOutOut:
        """Keep the remediation off a node (or a pod's or Slurm job's node) until then."""
        try:
            target = parse_target(
                body.target if body.scope == "node" else None,
                body.target if body.scope == "pod" else None,
                body.target if body.scope == "slurm_job" else None,
            )
            record = add_opt_out(ask, target, parse_duration(body.until), body.reason)
        except (OptOutRefused, ValueError) as exc:
            raise WebError(422, str(exc)) from exc
        return OptOutOut.of(record, ask.deps.clock.now())

    @api.delete("/optouts/{opt_out_id}")
    def delete_optout(
        ask: RemoveAsker,
        opt_out_id: OptOutId,
        reason: Annotated[str | None, Query(max_length=500, pattern=PRINTABLE)] = None,
    ) -> OptOutOut:
        """End an opt-out now (it stays listed under `all`, removed, with who ended it)."""
        record = remove_opt_out(ask, opt_out_id, reason)
        return OptOutOut.of(record, ask.deps.clock.now())

    @router.get("/optouts", response_class=HTMLResponse, include_in_schema=False)
    def optouts_page(
        request: Request,
        deps: Deps,
        principal: Reader,
        ended: Annotated[bool, Query(alias="all")] = False,
    ) -> HTMLResponse:
        now = deps.clock.now()
        records = book_of(deps).list(ended=ended)
        return render(
            request,
            "optouts.html",
            principal,
            records=[(r, r.state(now)) for r in records],
            labels=label_holds(deps),
            show_all=ended,
            longest=span(longest(deps)),
            span=span,
            opt_out_label=deps.settings.opt_out_label,
            done_optout=request.query_params.get("optout"),
        )

    @router.post("/optouts", include_in_schema=False)
    def optouts_add(
        ask: AddAsker,
        scope: Annotated[Literal["node", "pod", "slurm_job"], Form()],
        target: Annotated[str, Form(max_length=320)],
        until: Annotated[str, Form(max_length=32)],
        reason: Annotated[str, Form(max_length=500)] = "",
    ) -> Response:
        try:
            parsed = parse_target(
                target if scope == "node" else None,
                target if scope == "pod" else None,
                target if scope == "slurm_job" else None,
            )
            record = add_opt_out(ask, parsed, parse_duration(until), reason)
        except (OptOutRefused, ValueError) as exc:
            raise WebError(422, str(exc)) from exc
        return RedirectResponse(f"/optouts?optout=added-{record.id}", 303)

    @router.post("/optouts/{opt_out_id}/remove", include_in_schema=False)
    def optouts_remove(
        ask: RemoveAsker,
        opt_out_id: OptOutId,
        reason: Annotated[str, Form(max_length=500, pattern=PRINTABLE)] = "",
    ) -> Response:
        remove_opt_out(ask, opt_out_id, reason.strip() or None)
        return RedirectResponse(f"/optouts?optout=removed-{opt_out_id}", 303)

    router.include_router(api)
    return router
