"""The replay counts budgets as the controller does (#39 item 18): a queued remediation holds its
node from its admission for as long as the real one took, and a replacement in flight counts
toward `max_concurrent` after its old node has left. The report's text names the cluster and the
readings read, and a removed remediation is described under `before`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remediator.backtest import render
from remediator.backtest.compare import compare, episodes
from remediator.backtest.recording import RealRemediation, Recording
from remediator.backtest.replay import Replay, replay
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.signals.model import SignalKind
from remediator.store.archive import ArchivedRun, NodeChange

T0 = datetime(2026, 7, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
LADDER = ("cordon", "replace")
POLICIES = """
policies:
  - name: off-bus
    description: XID 79
    why: the GPU is gone
    match: {kind: xid, codes: [79]}
    actions: [{action: cordon}, {action: replace}]
"""


def policy_set(directory: Path, concurrent: int) -> PolicySet:
    directory.mkdir()
    (directory / "p.yaml").write_text(POLICIES)
    (directory / "settings.yaml").write_text(
        f"max_concurrent: {concurrent}\n"
        "max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}\n"
        "storm_breaker: {enabled: false}\n"
    )
    return load_policy_dir(directory)


def at(minutes: float) -> datetime:
    return T0 + minutes * MINUTE


def fault(node: str, minute: int) -> ArchivedRun:
    """One XID 79 reading of `node` at `minute`."""
    return ArchivedRun(node, 0, SignalKind.XID, 79, None, "dcgm", {}, None, at(minute), None, 1, 0)


def real(node: str, start: float, end: float) -> RealRemediation:
    """A replacement as it really ran, unqueued (history ran with a wide budget)."""
    return RealRemediation(node, "off-bus", "p", at(start), at(end), "succeeded", LADDER, False)


def joined(node: str) -> NodeChange:
    return NodeChange(at(-1), node, True, "p", {}, True, False)


def record(runs: list[ArchivedRun], nodes: list[NodeChange], history: list[RealRemediation]):
    return Recording(
        since=T0,
        until=at(40),
        cycles={"dcgm": [at(i) for i in range(40)]},
        runs=runs,
        nodes=nodes,
        remediations=history,
        cluster="west",
    )


def holds(result: Replay) -> list[tuple[str, datetime]]:
    return [(e.node, e.start) for e in episodes(result.held)]


def test_a_queued_remediation_holds_its_node_from_its_admission(tmp_path: Path) -> None:
    """By hand, with max_concurrent 2 and every replacement taking 10 minutes: n1 and n2 run
    0 to 10; n3 (minute 1) is held and admitted at 10, so it runs 10 to 20; at 12 n3 and n4
    run and n5 is held: 2 holds. Holding n3 only until its real end (11) let n4 and n5 both
    in: 1 hold."""
    recording = record(
        [fault("n1", 0), fault("n2", 0), fault("n3", 1), fault("n4", 12), fault("n5", 12)],
        [joined(f"n{i}") for i in range(1, 6)],
        [
            *(real("n1", 0, 10), real("n2", 0, 10), real("n3", 1, 11)),
            *(real("n4", 12, 22), real("n5", 12, 22)),
        ],
    )
    result = replay(recording, [(T0, policy_set(tmp_path / "two", 2))])
    assert holds(result) == [("n3", at(1)), ("n5", at(12))]
    n3 = next(o for o in result.opened if o.node == "n3")
    assert n3.admitted_at == at(10) and n3.until == at(20)


def test_a_replacement_in_flight_counts_after_its_old_node_left(tmp_path: Path) -> None:
    """n1 and n2 are replaced from 0 to 10; n1's old node is gone at 5 (the replacement took it) and
    its new machine joins at 8. The controller still counts n1 (REPLACING) until 10, so n3's
    fault at 6 is held until then."""
    nodes = [joined("n1"), joined("n2"), joined("n3")]
    nodes.append(NodeChange(at(5), "n1", False, "p", {}, True, True))
    nodes.append(NodeChange(at(8), "n1-new", True, "p", {}, True, False))
    recording = record(
        [fault("n1", 0), fault("n2", 0), fault("n3", 6)],
        nodes,
        [real("n1", 0, 10), real("n2", 0, 10), real("n3", 6, 16)],
    )
    result = replay(recording, [(T0, policy_set(tmp_path / "two", 2))])
    assert holds(result) == [("n3", at(6))]
    n3 = next(o for o in result.opened if o.node == "n3")
    assert n3.admitted_at == at(10)


def test_the_text_names_the_cluster_and_readings_and_a_removal_is_before(
    tmp_path: Path,
) -> None:
    recording = record(
        [fault("n1", 0), fault("n2", 0), fault("n3", 1)],
        [joined("n1"), joined("n2"), joined("n3")],
        [real("n1", 0, 10), real("n2", 0, 10), real("n3", 1, 11)],
    )
    wide = replay(recording, [(T0, policy_set(tmp_path / "wide", 10))])
    empty = tmp_path / "none"
    empty.mkdir()
    (empty / "settings.yaml").write_text("max_concurrent: 10\n")
    none = replay(recording, [(T0, load_policy_dir(empty))])
    report = compare(
        wide,
        none,
        recording.remediations,
        since=recording.since,
        until=recording.until,
        tolerance=MINUTE,
        cluster=recording.cluster,
    )
    text = render.to_text(report)
    assert "cluster west" in text.splitlines()[0]
    assert f"{wide.readings} readings in {wide.cycles} cycles read" in text
    body = json.loads(render.to_json_text(report))
    assert body["cluster"] == "west"
    assert len(body["removed"]) == 3
    for item in body["removed"]:
        assert "after" not in item and item["before"]["policy"] == "off-bus"


RACK_POLICIES = """
policies:
  - name: rack-off-bus
    description: XID 79 on a tray of an NVL72 rack
    why: the rack's NVLink domain is one unit
    match: {kind: xid, codes: [79]}
    scope: domain
    actions: [{action: cordon}, {action: replace}]
"""


def test_a_rack_wide_remediation_takes_its_rack_out_as_in_the_controller(tmp_path: Path) -> None:
    """With `max_domains_out: 1`, a rack-wide replacement of rack 0 (0 to 10) holds rack 1's
    fault at minute 1 until 10, as the controller's intake does (it passes the policies' scopes
    to `cluster_state`). Without the scopes the replay took it for a tray remediation: one
    tray is under the rack's own budget, so rack 0 was not out and rack 1 went in at once."""
    directory = tmp_path / "racks"
    directory.mkdir()
    (directory / "p.yaml").write_text(RACK_POLICIES)
    (directory / "settings.yaml").write_text(
        "max_concurrent: 10\nmax_domains_out: 1\n"
        "max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}\n"
        "storm_breaker: {enabled: false}\n"
    )
    trays = {f"r{rack}-t{tray}": f"rack{rack}.1" for rack in (0, 1) for tray in range(4)}
    nodes = [
        NodeChange(at(-1), name, True, "p", {"nvidia.com/gpu.clique": clique}, True, False)
        for name, clique in trays.items()
    ]
    history = [
        RealRemediation(
            node, "rack-off-bus", "p", at(start), at(start + 10), "succeeded", LADDER, False
        )
        for node, start in (("r0-t0", 0), ("r1-t0", 1))
    ]
    recording = record([fault("r0-t0", 0), fault("r1-t0", 1)], nodes, history)
    result = replay(recording, [(T0, load_policy_dir(directory))])
    assert holds(result) == [("r1-t0", at(1))]
    r1 = next(o for o in result.opened if o.node == "r1-t0")
    assert r1.admitted_at == at(10)
