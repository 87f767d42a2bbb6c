"""How a node agent's liveness is shown: pure, so the console, the API and the tests agree."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel

from remediator.store.records import AgentStatus


class Liveness(StrEnum):
    REPORTING = "reporting"
    SILENT = "silent"


class AgentOut(BaseModel):
    node: str
    agent: str
    version: str
    started_at: datetime
    seen_at: datetime
    seconds_since_heartbeat: float
    liveness: Liveness
    node_health: str  # "unknown" while silent; otherwise up to the signals, not to the agent
    stats: dict[str, int]


def liveness(status: AgentStatus, now: datetime, silent_after: timedelta) -> Liveness:
    return Liveness.SILENT if status.silent(now, silent_after) else Liveness.REPORTING


def agent_out(status: AgentStatus, now: datetime, silent_after: timedelta) -> AgentOut:
    state = liveness(status, now, silent_after)
    return AgentOut(
        node=status.node,
        agent=status.agent,
        version=status.version,
        started_at=status.started_at,
        seen_at=status.seen_at,
        seconds_since_heartbeat=max(0.0, (now - status.seen_at).total_seconds()),
        liveness=state,
        node_health="unknown" if state is Liveness.SILENT else "reported by signals",
        stats={k: int(v) for k, v in status.stats.items()},
    )
