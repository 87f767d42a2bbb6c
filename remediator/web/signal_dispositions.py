"""`GET /api/v1/signals?node=`: the signals taken in for a node, newest first, each with what
became of it (opened #N, joined #N, folded, in cooldown until T, suppressed by cancel #N, below
threshold, no policy matches, …), so an accepted signal that opened nothing says why."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from remediator.signals import bounds
from remediator.web.access import Deps, require_reader
from remediator.web.nodes import NODE_PAGE, NodeQuery, signal_entry_out, signals_page
from remediator.web.problems import ERRORS
from remediator.web.query import PositionCursor, QueryTime
from remediator.web.schemas import SignalEntryOut

MAX_PAGE = 500


class SignalPageOut(BaseModel):
    node: str
    items: list[SignalEntryOut]
    total: int = Field(description="signals of the node within the window")
    next_cursor: str | None = None


def make_dispositions_router() -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["console"], responses=ERRORS)

    @router.get("/signals", dependencies=[Depends(require_reader)])
    def list_signals(
        deps: Deps,
        node: Annotated[str, Query(max_length=253, pattern=f"^{bounds.NODE_NAME.pattern}$")],
        window_from: Annotated[QueryTime | None, Query(alias="from")] = None,
        window_to: Annotated[QueryTime | None, Query(alias="to")] = None,
        cursor: PositionCursor = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = NODE_PAGE,
    ) -> SignalPageOut:
        """The node's signals within the window (default: the last 7 days), each with its
        disposition."""
        query = NodeQuery(window_from, window_to, None, cursor, limit)
        shown, total, following = signals_page(deps, node, deps.clock.now(), query)
        return SignalPageOut(
            node=node,
            items=[signal_entry_out(s) for s in shown],
            total=total,
            next_cursor=following,
        )

    return router
