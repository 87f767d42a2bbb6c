"""bench/scale_10k.py's load generator speaks the agent's heartbeat protocol (issue #28): the
host's identity whole on a node's first heartbeat and when the answer asks, its digest on every
other, each body one the push API takes. The bench itself is not run here."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from bench.scale_10k import GPUS, Agents, heartbeat_body
from remediator.agent.heartbeat import Pacing, judge, whole_due
from remediator.web.agents import HeartbeatIn

START = datetime(2026, 11, 1, tzinfo=UTC)


def test_the_generators_bodies_are_the_agents() -> None:
    whole = HeartbeatIn.model_validate(heartbeat_body("h100-train-0042", START, whole=True))
    short = HeartbeatIn.model_validate(heartbeat_body("h100-train-0042", START, whole=False))
    assert whole.hardware is not None and short.hardware is None
    assert whole.hardware.dmi_serial == "BENCH-h100-train-0042"
    assert sorted(g.index for g in whole.hardware.gpus if g.index is not None) == list(range(GPUS))
    assert short.hardware_digest == whole.hardware_digest == whole.hardware.host().digest
    other = HeartbeatIn.model_validate(heartbeat_body("h100-train-0043", START, whole=True))
    assert other.hardware_digest != whole.hardware_digest


def test_a_node_sends_its_host_whole_until_answered_then_when_asked() -> None:
    agents = Agents("http://127.0.0.1:9", ["n1"], Pacing())
    try:
        due = True
        sent = []
        answers = [
            judge(503, {"retry-after": "1"}),  # not answered: whole again
            judge(200, {}, '{"recorded": true, "send_hardware": false}'),
            judge(200, {}, '{"recorded": true, "send_hardware": false}'),
            judge(200, {}, '{"recorded": true, "send_hardware": true}'),  # restarted controller
            judge(200, {}, '{"recorded": true, "send_hardware": false}'),
        ]
        for beat in answers:
            sent.append("hardware" in json.loads(agents._body("n1", due)))
            due = whole_due(due, beat)
        assert sent == [True, True, False, False, True]
        assert agents._body("n1", False) is agents._body("n1", False)  # encoded once
    finally:
        agents.loop.close()
