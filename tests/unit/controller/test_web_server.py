"""The controller's HTTP server keeps an agent's connection between its heartbeats: with
uvicorn's default keep-alive (5 s) every heartbeat (every 10 s ±20 %) opened a new connection,
1,000 accepts a second at 10,000 agents."""

from __future__ import annotations

from remediator.agent.heartbeat import Pacing
from remediator.controller.app import LISTEN_BACKLOG, web_server_config


def app(scope: object, receive: object, send: object) -> None:
    raise AssertionError("never called")


def test_an_idle_agent_connection_outlives_the_longest_heartbeat_interval() -> None:
    pacing = Pacing()
    longest = pacing.period * (1 + pacing.spread)
    config = web_server_config(app)
    assert config.timeout_keep_alive > longest
    assert config.access_log is False


def test_the_listen_backlog_holds_a_fleet_reconnecting() -> None:
    assert LISTEN_BACKLOG >= 1024
