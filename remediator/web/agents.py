"""Node agents: their heartbeats come in here (push-only tokens may send them) and their
liveness goes out to the console, the API and `/metrics`.

A heartbeat is one row per node, overwritten; an agent that stopped sending is *silent*, and
its node's health is *unknown* — never "healthy", because nothing the agent would have seen (an
XID, a vanished GPU) can be ruled out.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from remediator.web.access import Deps, Pusher, Reader
from remediator.web.agent_views import AgentOut, Liveness, agent_out

NODE_PATTERN = r"^[^\x00-\x20\x7f]+$"
Counter = Annotated[int, Field(ge=0, le=2**62)]


class HeartbeatIn(BaseModel):
    """What an agent says about itself: who, since when, and its counters."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(min_length=1, max_length=253, pattern=NODE_PATTERN)
    agent: str = Field(min_length=1, max_length=256)
    version: str = Field(min_length=1, max_length=64)
    started_at: AwareDatetime
    stats: dict[Annotated[str, Field(max_length=64)], Counter] = Field(
        default_factory=dict, max_length=64
    )


class HeartbeatOut(BaseModel):
    recorded: bool
    silent_after_seconds: float


def silent_after(deps: Deps) -> timedelta:
    return timedelta(seconds=deps.settings.agent_silent_after_seconds)


def make_agents_router() -> APIRouter:
    router = APIRouter(tags=["agents"])

    @router.post("/api/v1/agents/heartbeat")
    def heartbeat(body: HeartbeatIn, deps: Deps, _principal: Pusher) -> HeartbeatOut:
        """A node agent is alive; push-only tokens may call this."""
        deps.repository.record_heartbeat(
            body.node,
            agent=body.agent,
            version=body.version,
            started_at=body.started_at,
            stats=body.stats,
        )
        return HeartbeatOut(
            recorded=True, silent_after_seconds=deps.settings.agent_silent_after_seconds
        )

    @router.get("/api/v1/agents")
    def agents(deps: Deps, _principal: Reader) -> list[AgentOut]:
        """Every node agent that ever reported, silent ones first."""
        now, after = deps.clock.now(), silent_after(deps)
        found = [agent_out(s, now, after) for s in deps.repository.agent_statuses()]
        return sorted(found, key=lambda a: (a.liveness is Liveness.REPORTING, a.node))

    return router
