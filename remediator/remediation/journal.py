"""One structured log line per transition, for whoever follows a remediation through the logs:
its id, node and policy, from → to, why, and how long it spent in the state it left. The engine
writes it for its own moves and the commands for a human's (cancel, approve, release, retry)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from remediator.model.states import State
from remediator.store.records import RemediationRecord

log = logging.getLogger("remediator.transitions")

_REASON_KEYS = ("reason", "result", "error", "command")


def entered_at(record: RemediationRecord, state: State) -> datetime:
    """When the remediation last entered `state`, from its timeline."""
    for event in reversed(record.events):
        if event.to_state is state:
            return event.at
    return record.updated_at


def transition_reason(action: str, detail: Mapping[str, Any]) -> str:
    """The most telling words the timeline line has: its reason, else its result, else the
    action's own name."""
    for key in _REASON_KEYS:
        value = detail.get(key)
        if isinstance(value, str) and value:
            return value
    return action


def log_transition(
    from_state: State,
    after: RemediationRecord,
    *,
    action: str,
    detail: Mapping[str, Any],
    seconds_in_state: float,
    actor: str,
) -> None:
    reason = transition_reason(action, detail)
    log.info(
        "remediation %d on %s: %s → %s after %.2fs: %s",
        after.id,
        after.node,
        from_state.value,
        after.state.value,
        seconds_in_state,
        reason,
        extra={
            "remediation_id": after.id,
            "node": after.node,
            "policy": after.policy,
            "state": after.state.value,
            "from_state": from_state.value,
            "to_state": after.state.value,
            "action": action,
            "reason": reason,
            "seconds_in_state": round(seconds_in_state, 3),
            "actor": actor,
        },
    )
