"""Fences in the API (docs/safety.md): `GET /api/v1/fences` lists every node the fence owner
looked at in its last pass (the fences due, their drift, the foreign ones), and
`POST /api/v1/fences/{node}` records an operator's decision — fence a node, release a fence,
adopt a foreign one — always with a reason, audited. A refused request writes nothing: an
unknown node is 404, a missing reason 422, a command that does not fit the node's fence (or a
console without the fence owner) 409.
The leader's next pass (woken at once) carries the decision out."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from remediator.fences.owner import FenceOwner, FenceRefused, FenceView
from remediator.store.fences import FenceAction
from remediator.store.optouts import Asker as BookAsker
from remediator.web.access import Deps, require_reader
from remediator.web.deps import WebDeps
from remediator.web.oncall import Asked, asker_for, record_command
from remediator.web.problems import ERRORS, WebError

REASON = r"^[^\x00-\x1f\x7f]*[^\x00-\x20\x7f][^\x00-\x1f\x7f]*$"
NODE = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
FenceAsker = Annotated[Asked, Depends(asker_for("fence"))]


class NeedOut(BaseModel):
    kind: Literal["remediation", "new_machine", "operator", "failed_validation"]
    reason: str
    remediation_id: int | None = None
    decision_id: int | None = None


class FenceOut(BaseModel):
    node: str
    owner: Literal["none", "ours", "foreign"]
    needs: list[NeedOut] = Field(description="why the store requires the node fenced")
    drift: list[str] = Field(description="what a due fence lacked at the last pass")
    mark: dict[str, str] = Field(description="the marks the node carried")
    why: str = Field(description="for a foreign fence: why it is not this store's")

    @classmethod
    def of(cls, view: FenceView) -> FenceOut:
        return cls(
            node=view.node,
            owner=view.owner.value,
            needs=[
                NeedOut(
                    kind=n.kind.value,
                    reason=n.reason,
                    remediation_id=n.remediation_id,
                    decision_id=n.decision_id,
                )
                for n in view.needs
            ],
            drift=list(view.drift),
            mark=dict(view.mark),
            why=view.why,
        )


class FencesOut(BaseModel):
    items: list[FenceOut]
    error: str | None = Field(
        default=None, description="why the fences cannot be told (no fence owner in this console)"
    )


class FenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    action: Literal["fence", "release", "adopt"]
    reason: str = Field(min_length=1, max_length=500, pattern=REASON)


class DecisionOut(BaseModel):
    id: int
    node: str
    action: Literal["fence", "release", "adopt"]
    reason: str
    by: str


NO_OWNER = "this console runs no fence owner (no cluster access)"


def owner_of(deps: WebDeps) -> FenceOwner:
    """A console without cluster access cannot fence: its state does not allow it (409)."""
    if deps.fences is None:
        raise WebError(409, NO_OWNER)
    return deps.fences


def make_fences_router() -> APIRouter:
    api = APIRouter(prefix="/api/v1", tags=["console"], responses=ERRORS)

    @api.get("/fences", dependencies=[Depends(require_reader)])
    def list_fences(deps: Deps) -> FencesOut:
        """Every fenced or due node of the last look: ours, foreign, and what drifted."""
        if deps.fences is None:
            return FencesOut(items=[], error=NO_OWNER)
        return FencesOut(items=[FenceOut.of(v) for v in deps.fences.views()])

    @api.post("/fences/{node}", status_code=201)
    def post_fence(
        ask: FenceAsker,
        node: Annotated[str, Path(max_length=253, pattern=NODE)],
        body: Annotated[FenceIn, Body()],
    ) -> DecisionOut:
        """Fence a node, release a fence, or adopt a foreign one, with a reason (audited)."""
        owner = owner_of(ask.deps)
        try:
            decision = owner.command(
                node,
                FenceAction(body.action),
                reason=body.reason,
                asker=BookAsker(ask.principal.actor, ask.source, ask.principal.fingerprint),
                node_known=ask.deps.node_known,
            )
        except FenceRefused as exc:
            # Audited under the name the done row has (fence_release, …), not the route's.
            command = f"fence_{body.action}"
            outcome = "not_found" if exc.status == 404 else "refused"
            record_command(ask, command, outcome, body.reason, detail=str(exc), target=node)
            raise WebError(exc.status, str(exc)) from exc
        ask.deps.fences_changed()
        return DecisionOut(
            id=decision.id,
            node=decision.node,
            action=decision.action.value,
            reason=decision.reason,
            by=decision.actor,
        )

    return api
