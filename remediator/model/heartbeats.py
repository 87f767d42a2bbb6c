"""How often the controller asks node agents to say they are alive.

Each heartbeat is an HTTP request the controller answers (~0.2-0.5 ms of CPU in Python): 10,000
agents on a 10 s period are 1,000 a second, a sixth of a core before a single fault. So the
controller holds the fleet to a budget of heartbeats a second and tells each agent the least
period that keeps it (10,000 agents at 40/s: every 250 s); an agent keeps its own period when
that is longer. Silence is judged against the period asked: three missed heartbeats, never less
than the configured bound. Faults do not wait for heartbeats: they are pushed as they happen.
"""

from __future__ import annotations

MAX_ASKED_SECONDS = 3600.0  # past this an answer is a broken server, not advice
MISSED_BEATS = 3


def asked_period(agents: int, budget_per_second: float | None) -> float:
    """The least period (s) at which `agents` stay within the budget; 0 without one."""
    if not budget_per_second or agents <= 0:
        return 0.0
    return min(MAX_ASKED_SECONDS, agents / budget_per_second)


def silent_after(configured: float, asked: float) -> float:
    """Seconds without a heartbeat after which an agent is silent."""
    return max(configured, MISSED_BEATS * asked)
