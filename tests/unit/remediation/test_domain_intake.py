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
