"""What became of a remediation a proposed budget held: a hold whose node history replaced a
few seconds later is reported as closed because its node left, naming the remediation that
took it out, not as "queued, never admitted"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from remediator.backtest.compare import compare
from remediator.backtest.recording import RealRemediation, Recording
from remediator.backtest.replay import replay
from remediator.policy.loader import load_policy_dir
from remediator.signals.model import SignalKind
from remediator.store.archive import ArchivedRun, NodeChange

T0 = datetime(2026, 7, 1, tzinfo=UTC)
POLL = timedelta(seconds=30)
POLICIES = """
policies:
  - name: off-bus
    description: XID 79
    why: the GPU is gone
    match: {kind: xid, codes: [79]}
    actions: [{action: cordon}, {action: replace}]
"""


def policy_set(directory: Path, concurrent: int) -> object:
    directory.mkdir()
    (directory / "p.yaml").write_text(POLICIES)
    (directory / "settings.yaml").write_text(
        f"max_concurrent: {concurrent}\n"
        "max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}\n"
    )
    return load_policy_dir(directory)


def xid(node: str, cycles: int) -> ArchivedRun:
    return ArchivedRun(
        node, 0, SignalKind.XID, 79, None, "dcgm", {}, None, T0, T0 + (cycles - 1) * POLL, cycles, 0
    )


def test_a_hold_whose_node_history_replaced_says_so(tmp_path: Path) -> None:
    replaced_at = T0 + timedelta(seconds=45)
    recording = Recording(
        since=T0,
        until=T0 + 20 * POLL,
        cycles={"dcgm": [T0 + i * POLL for i in range(20)]},
        runs=[xid("n1", 20), xid("n2", 2)],
        nodes=[
            NodeChange(T0 - POLL, "n1", True, "p", {}, True, False),
            NodeChange(T0 - POLL, "n2", True, "p", {}, True, False),
            NodeChange(T0 - POLL, "n3", True, "p", {}, True, False),
            NodeChange(replaced_at, "n2", False, "p", {}, True, True),
        ],
        remediations=[
            RealRemediation(
                "n1", "off-bus", "p", T0, None, "replacing", ("cordon", "replace"), False
            ),
            RealRemediation(
                "n2", "off-bus", "p", T0, replaced_at, "succeeded", ("cordon", "replace"), False
            ),
        ],
    )
    wide = replay(recording, [(T0, policy_set(tmp_path / "wide", 10))])
    narrow = replay(recording, [(T0, policy_set(tmp_path / "narrow", 1))])
    report = compare(
        wide,
        narrow,
        recording.remediations,
        since=recording.since,
        until=recording.until,
        tolerance=timedelta(minutes=1),
    )
    assert report.mismatches == ()
    (changed,) = report.changed
    closed_at = T0 + 2 * POLL  # the first cycle after the node left
    assert changed.node == "n2"
    assert changed.detail == (
        f"queued, closed at {closed_at.isoformat()} without being admitted: node n2 has left "
        f"the cluster (history's off-bus remediation from {T0.isoformat()} took it out)"
    )
    (hold,) = report.holds_added
    assert hold.detail.startswith("held ") and f"closed at {closed_at.isoformat()}" in hold.detail
