"""Kernel events that arrive late (an agent's queue delivered after a controller outage) are
decided by their own time, not by when they arrived (#22 item 6)."""

from __future__ import annotations

from remediator.policy.evaluate import History, PastRemediation, evaluate
from tests.unit.policy.builders import SETTINGS, at, policy, signal

HOUR = 3600
XID79 = policy("xid-79", {"kind": "xid", "codes": [79]}, priority=100)
BURST = policy(
    "xid-74-burst", {"kind": "xid", "codes": [74], "burst": {"count": 3, "within": "10m"}}
)


def test_a_late_xid_79_opens_a_remediation() -> None:
    late = signal("n1", "xid", 0, gpu=3, code=79)
    (decision,) = evaluate([late], History(), [XID79], at(6 * HOUR), SETTINGS).decisions
    assert (decision.policy, decision.node) == ("xid-79", "n1")


def test_a_burst_is_counted_by_the_events_own_times() -> None:
    """Three XIDs hours apart, delivered together, are not three within ten minutes."""
    spread = [signal("n1", "xid", t, gpu=g, code=74) for g, t in enumerate((0, 4 * HOUR, 8 * HOUR))]
    assert evaluate(spread, History(), [BURST], at(8 * HOUR + 60), SETTINGS).decisions == ()


def test_a_late_burst_that_happened_within_its_window_still_counts() -> None:
    close = [signal("n1", "xid", t, gpu=g, code=74) for g, t in enumerate((0, 120, 240))]
    (decision,) = evaluate(close, History(), [BURST], at(2 * HOUR), SETTINGS).decisions
    assert "3 events within 10m" in decision.reason


def test_a_late_event_from_before_the_nodes_last_remediation_was_covered_by_it() -> None:
    """The pull path saw the fault and the node was repaired; the agent's copy of the same XID,
    queued behind a cut network, arrives hours later (past the fold window and the cooldown). The
    remediation that started after the XID happened already covered it: nothing new opens. A
    fault from after that remediation still does."""
    repaired = PastRemediation("n1", "xid-79", at(60), "succeeded")
    history = History.build(remediations=[repaired])
    now = at(4 * HOUR)
    before = signal("n1", "xid", 0, gpu=3, code=79)
    assert evaluate([before], history, [XID79], now, SETTINGS).decisions == ()
    after = signal("n1", "xid", 2 * HOUR, gpu=3, code=79)
    (decision,) = evaluate([after], history, [XID79], now, SETTINGS).decisions
    assert decision.policy == "xid-79"
