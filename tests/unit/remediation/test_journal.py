"""Every transition is one structured log line: id, node, from → to, reason, seconds in state."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from remediator.controller.logging import JsonFormatter
from remediator.model.states import State
from remediator.remediation.journal import log_transition, transition_reason
from remediator.store.records import RemediationRecord

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def record(state: State) -> Any:
    fields: dict[str, Any] = dict.fromkeys(RemediationRecord.__dataclass_fields__)
    fields.update(id=7, node="gpu-3", state=state, policy="xid-79", events=())
    return RemediationRecord(**fields)


def test_one_json_line_carries_the_whole_transition(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="remediator.transitions"):
        log_transition(
            State.CHECKPOINTING,
            record(State.DRAINING),
            action="checkpoint_done",
            detail={"result": "every workload on gpu-3 has had its notice", "asked": []},
            seconds_in_state=5.1234,
            actor="controller c-1",
        )
    (line,) = caplog.records
    entry = json.loads(JsonFormatter().format(line))
    assert entry["msg"] == (
        "remediation 7 on gpu-3: checkpointing → draining after 5.12s: "
        "every workload on gpu-3 has had its notice"
    )
    assert {k: entry[k] for k in ("remediation_id", "node", "from_state", "to_state")} == {
        "remediation_id": 7,
        "node": "gpu-3",
        "from_state": "checkpointing",
        "to_state": "draining",
    }
    assert entry["seconds_in_state"] == 5.123 and entry["action"] == "checkpoint_done"
    assert entry["reason"] == "every workload on gpu-3 has had its notice"
    assert entry["policy"] == "xid-79" and entry["actor"] == "controller c-1"


def test_the_reason_is_the_most_telling_words_the_timeline_has() -> None:
    assert transition_reason("drain_held", {"reason": "PDB", "result": "x"}) == "PDB"
    assert transition_reason("drain_done", {"result": "node drained"}) == "node drained"
    assert transition_reason("cancelled", {"command": "cancel"}) == "cancel"
    assert transition_reason("started", {"ladder": ["quarantined"]}) == "started"
