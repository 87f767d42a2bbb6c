"""Node agents: their heartbeats come in here (push-only tokens may send them) and their
liveness goes out to the console, the API and `/metrics`.

A heartbeat is one row per node, overwritten; an agent that stopped sending is *silent*, and
its node's health is *unknown* — never "healthy", because nothing the agent would have seen (an
XID, a vanished GPU) can be ruled out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from remediator.web.access import Deps, Pusher, Reader
from remediator.web.agent_views import AgentOut, Liveness, agent_out
from remediator.web.problems import ERRORS

NODE_PATTERN = r"^[^\x00-\x20\x7f]+$"
# No control characters anywhere: PostgreSQL refuses NUL in text, and the console shows these.
Printable = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")]
# A dict's keys are validated by pydantic but left out of its JSON schema: say them here.
StatsKeys = WithJsonSchema(
    {
        "type": "object",
        "maxProperties": 64,
        "propertyNames": {"minLength": 1, "maxLength": 64, "pattern": r"^[^\x00-\x1f\x7f]+$"},
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 2**62},
    }
)
Counter = Annotated[int, Field(ge=0, le=2**62)]


class HeartbeatIn(BaseModel):
    """What an agent says about itself: who, since when, and its counters."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(min_length=1, max_length=253, pattern=NODE_PATTERN)
    agent: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")
    version: Printable
    started_at: AwareDatetime
    stats: Annotated[dict[Printable, Counter], StatsKeys] = Field(
        default_factory=dict, max_length=64
    )

    @field_validator("started_at")
    @classmethod
    def _in_utc(cls, value: datetime) -> datetime:
        try:
            return value.astimezone(UTC)
        except OverflowError as exc:  # 0001-01-01T00:00+01:00 has no UTC time
            raise ValueError("outside the range of UTC times") from exc


class HeartbeatOut(BaseModel):
    recorded: bool
    silent_after_seconds: float


def silent_after(deps: Deps) -> timedelta:
    return timedelta(seconds=deps.settings.agent_silent_after_seconds)


def make_agents_router() -> APIRouter:
    # Errors answer {"reason", "detail"} like the rest of the API (app's handlers): documented
    # so, or clients and schema checks would expect FastAPI's default 422 shape.
    router = APIRouter(
        tags=["agents"],
        responses={code: ERRORS[code] for code in (400, 401, 403, 422)},
    )

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
