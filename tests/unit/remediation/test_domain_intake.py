"""The real Intake on a domain-scoped policy (issue 29): 18 trays of one NVL72 rack going
NotReady together open ONE remediation whose timeline holds every tray's signal, trip no storm
breaker, and later signals from its trays join it; the other rack is held by max_domains_out."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.clock import FakeClock
from remediator.model.topology import CLIQUE_LABEL
from remediator.policy.ladder import parse_ladder
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.remediation.intake import Intake, Inventory
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.repository import Repository

T0 = datetime(2026, 4, 1, tzinfo=UTC)
TRAYS = [f"nvl-r{r}-t{t:02d}" for r in range(2) for t in range(18)]
RACK_POLICY = """\
policies:
  - name: rack-down
    description: a rack's trays NotReady together
    why: the NVLink domain is one unit
    match: {kind: node_condition, labels: {type: Ready}}
    scope: domain
    actions: [{action: cordon}, {action: drain}, {action: replace}]
"""


@pytest.fixture
def policies(tmp_path: Path) -> PolicySet:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "rack.yaml").write_text(RACK_POLICY)
    return load_policy_dir(tmp_path / "policies")


@pytest.fixture
def world(sqlite_head_template: Path, tmp_path: Path) -> tuple[Intake, Repository]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    repository = Repository(db.make_session_factory(engine), "default", FakeClock(T0))
    return Intake(repository, actor="test"), repository


def inventory(not_ready: list[str]) -> Inventory:
    return Inventory(
        pools=dict.fromkeys(TRAYS, "nvl"),
        labels={
            node: {CLIQUE_LABEL: f"rack{node[5]}-uuid.0", "remediator.io/tray": node[-2:]}
            for node in TRAYS
        },
        not_ready=frozenset(not_ready),
        gpus=dict.fromkeys(TRAYS, 4),
    )


def not_ready(node: str, at: datetime) -> Signal:
    return Signal(
        node=node,
        kind=SignalKind.NODE_CONDITION,
        source="node_conditions",
        observed_at=at,
        code=1,
        labels={"type": "Ready"},
    )


def test_a_rack_not_ready_opens_one_domain_remediation(
    world: tuple[Intake, Repository], policies: PolicySet
) -> None:
    intake, repository = world
    rack0 = TRAYS[:18]
    result = intake.process([not_ready(n, T0) for n in rack0], inventory(rack0), policies, T0)
    (opened,) = result.created
    assert opened.node == "nvl-r0-t00" and result.breaker_tripped is None
    assert result.dispositions == {"opened": 18}
    linked = {e.signal.node for n in rack0 for e in repository.signals_for_node(n)}
    assert linked == set(rack0)
    assert all(
        e.disposition == f"opened #{opened.id}"
        for n in rack0
        for e in repository.signals_for_node(n)
    )

    later = T0 + timedelta(seconds=30)
    again = intake.process(
        [not_ready("nvl-r0-t07", later), not_ready("nvl-r1-t03", later)],
        inventory([*rack0, "nvl-r1-t03"]),
        policies,
        later,
    )
    assert again.created == ()
    (queued,) = again.queued
    assert queued.node == "nvl-r1-t03"
    assert queued.hold_reason == "max domains out in pool nvl (1)"
    assert again.dispositions == {"joined": 1, "queued": 1}
    assert repository.controller_status().breaker_tripped is False


TRAY_POLICY = """\
  - name: tray-xid
    description: a tray's own XID 79
    why: one tray's GPU fell off the bus
    match: {kind: xid, codes: [79]}
    actions: [{action: cordon}, {action: drain}, {action: replace}]
  - name: nvswitch-fatal
    description: a fatal SXid fences the rack
    why: the switch fabric is the domain's
    match: {kind: sxid, labels: {fatal: "true"}}
    scope: domain
    priority: 110
    actions: [{action: cordon}, {action: drain}, {action: reboot}]
"""


def fault(node: str, kind: SignalKind, at: datetime, **labels: str) -> Signal:
    code = 79 if kind is SignalKind.XID else 22003
    return Signal(node=node, kind=kind, source="push", observed_at=at, code=code, labels=labels)


def test_one_tray_held_in_rack_0_does_not_queue_a_fatal_sxid_of_rack_1(
    world: tuple[Intake, Repository], tmp_path: Path
) -> None:
    """Issue 39 item 2: a tray remediation takes its tray out, not its rack; the rack-scope
    remediation of rack 1 is admitted, while a second rack-scope one still waits."""
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "both.yaml").write_text("policies:\n" + TRAY_POLICY)
    policies = load_policy_dir(tmp_path / "policies")
    intake, _repository = world
    (tray,) = intake.process(
        [fault("nvl-r0-t03", SignalKind.XID, T0)], inventory([]), policies, T0
    ).created
    assert tray.node == "nvl-r0-t03"

    later = T0 + timedelta(seconds=30)
    rack1 = [fault(n, SignalKind.SXID, later, fatal="true") for n in TRAYS[18:]]
    result = intake.process(rack1, inventory([]), policies, later)
    assert result.queued == ()
    (rack,) = result.created
    assert rack.node == "nvl-r1-t00" and rack.policy == "nvswitch-fatal"


def test_a_domain_past_its_own_tray_budget_counts_as_out(
    world: tuple[Intake, Repository], tmp_path: Path
) -> None:
    """Three trays of rack 0 fenced (the default per_domain budget is 2 of 18): rack 0 is out,
    so rack 1's rack-scope fault waits for max_domains_out."""
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "both.yaml").write_text("policies:\n" + TRAY_POLICY)
    (tmp_path / "policies" / "settings.yaml").write_text(
        "max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}\n"
    )
    policies = load_policy_dir(tmp_path / "policies")
    intake, _repository = world
    trays = ["nvl-r0-t01", "nvl-r0-t02", "nvl-r0-t03"]
    opened = intake.process(
        [fault(n, SignalKind.XID, T0) for n in trays], inventory([]), policies, T0
    ).created
    assert sorted(r.node for r in opened) == trays

    later = T0 + timedelta(seconds=30)
    rack1 = [fault(n, SignalKind.SXID, later, fatal="true") for n in TRAYS[18:]]
    result = intake.process(rack1, inventory([]), policies, later)
    assert result.created == ()
    (queued,) = result.queued
    assert queued.hold_reason == "max domains out in pool nvl (1)"


SHIPPED = Path(__file__).resolve().parents[3] / "policies"


def test_a_rack_losing_power_opens_one_rack_down_remediation_with_the_shipped_policies(
    world: tuple[Intake, Repository],
) -> None:
    """Issue 39 item 3: 18 trays of rack 0 NotReady for ten minutes (and one tray of rack 1)
    open ONE rack-down remediation for rack 0, ending in the rack's validation, and leave the
    lone tray of rack 1 to node-not-ready."""
    policies = load_policy_dir(SHIPPED)
    intake, repository = world
    down = [*TRAYS[:18], "nvl-r1-t04"]
    for tick in range(0, 10 * 60 + 1, 15):
        now = T0 + timedelta(seconds=tick)
        intake.process([not_ready(n, now) for n in down], inventory(down), policies, now)
    rack0 = [r for r in repository.list_open() if r.node in TRAYS[:18]]
    assert [(r.node, r.policy) for r in rack0] == [("nvl-r0-t00", "rack-down")]
    (record,) = rack0
    assert [step.action for step in parse_ladder(record.ladder)][-2:] == ["replace", "validate"]
    loaded = repository.get(record.id)
    assert loaded is not None and dict(loaded.events[0].detail)["trays"] == 18
    (lone,) = [r for r in repository.list_open() if r.node == "nvl-r1-t04"]
    assert lone.policy == "node-not-ready"
