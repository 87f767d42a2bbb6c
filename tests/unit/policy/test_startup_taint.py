"""The startup taint (#26): the setting is checked with file and line, the remediation's validate
step records it, machines a replacement brought are not validated twice, and a policy set that
validates without it is warned about."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from remediator.errors import PolicyError
from remediator.kube.objects import Node, Taint
from remediator.model.states import State
from remediator.policy.ladder import ladder_from_policy, with_startup_taint
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.policy.startup import startup_taint_warning
from remediator.remediation.intake import without_brought_machines
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.node_conditions import unvalidated_signals
from remediator.store.records import RemediationRecord

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
TAINT = "remediator.io/unvalidated=true:NoSchedule"
VALIDATING = """\
policies:
  - name: lost
    description: fell off the bus
    why: a dead GPU
    match: {kind: xid, codes: [79]}
    actions:
      - action: replace
      - action: validate
        nccl: false
"""
NEW_MACHINES = """\
policies:
  - name: new
    description: joined with the startup taint, no remediation
    why: new machines arrive bad
    match: {kind: unvalidated}
    actions:
      - action: validate
        nccl: false
      - action: uncordon
"""


def load(tmp_path: Path, policies: str, settings: str) -> PolicySet:
    (tmp_path / "p.yaml").write_text(policies)
    (tmp_path / "settings.yaml").write_text(f"max_concurrent: 5\n{settings}")
    return load_policy_dir(tmp_path)


@pytest.mark.parametrize(
    "value",
    ["remediator.io/unvalidated", "a=b:PreferNoSchedule", "=x:NoSchedule", "k=v:noschedule"],
)
def test_a_startup_taint_not_in_kubelet_syntax_is_refused_with_file_and_line(
    tmp_path: Path, value: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        load(tmp_path, VALIDATING, f"startup_taint: '{value}'\n")
    (problem,) = caught.value.problems
    assert problem.startswith("settings.yaml:2: startup_taint: ")
    assert "--register-with-taints" in problem


@pytest.mark.parametrize(
    ("spec", "taint"),
    [
        (TAINT, Taint("remediator.io/unvalidated", "true", "NoSchedule")),
        ("unvalidated:NoExecute", Taint("unvalidated", "", "NoExecute")),
    ],
)
def test_the_setting_parses_as_the_kubelet_reads_it(
    tmp_path: Path, spec: str, taint: Taint
) -> None:
    policies = load(tmp_path, VALIDATING, f"startup_taint: {spec}\n")
    assert policies.settings.startup_taint == spec
    assert Taint.parse(spec) == taint


def test_the_validate_step_records_the_startup_taint_and_other_steps_do_not(
    tmp_path: Path,
) -> None:
    policies = load(tmp_path, VALIDATING, f"startup_taint: {TAINT}\n")
    (policy,) = policies.policies
    ladder = with_startup_taint(ladder_from_policy(policy.actions), TAINT)
    assert [step["action"] for step in ladder] == ["replace", "validate"]
    assert "checks" not in ladder[0]
    assert ladder[1]["checks"]["startup_taint"] == TAINT
    unset = with_startup_taint(ladder_from_policy(policy.actions), None)
    assert "startup_taint" not in unset[1]["checks"]


def test_validate_without_a_step_before_it_only_for_machines_that_joined_by_themselves(
    tmp_path: Path,
) -> None:
    assert load(tmp_path, NEW_MACHINES, "")
    other = NEW_MACHINES.replace("kind: unvalidated", "kind: xid, codes: [79]")
    with pytest.raises(PolicyError) as caught:
        load(tmp_path, other, "")
    assert any("validate needs a repair or a replace" in p for p in caught.value.problems)


def test_doctor_warns_when_policies_validate_without_a_startup_taint(tmp_path: Path) -> None:
    unset = load(tmp_path, VALIDATING, "")
    warning = startup_taint_warning(unset.policies, unset.settings)
    assert warning is not None and "lost" in warning and "startup_taint" in warning
    set_ = load(tmp_path, VALIDATING, f"startup_taint: {TAINT}\n")
    assert startup_taint_warning(set_.policies, set_.settings) is None
    quiet = VALIDATING.replace("      - action: validate\n        nccl: false\n", "")
    none = load(tmp_path, quiet, "")
    assert startup_taint_warning(none.policies, none.settings) is None


def node(name: str, *taints: Taint) -> Node:
    return Node.from_json(
        {
            "metadata": {"name": name, "labels": {"pool": "p"}},
            "spec": {"taints": [t.to_json() for t in taints]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def test_a_node_with_the_startup_taint_is_an_unvalidated_signal() -> None:
    nodes = [
        node("new", Taint.parse(TAINT)),
        node("old"),
        node("other", Taint("example.com/gpu", "x", "NoSchedule")),
    ]
    signals = unvalidated_signals(nodes, "remediator.io/unvalidated", "nodes", NOW)
    assert [(s.node, s.kind) for s in signals] == [("new", SignalKind.UNVALIDATED)]
    assert signals[0].labels["taint"] == "remediator.io/unvalidated"


def record(state: State, pool: str, new_node: str | None) -> RemediationRecord:
    return RemediationRecord(
        id=1,
        cluster="c",
        node="old",
        pool=pool,
        policy="lost",
        policy_priority=0,
        policy_commit=None,
        policy_hash=None,
        state=state,
        dry_run=False,
        approval_required=False,
        reason="",
        signal_kind="xid",
        xid_code=79,
        signals=(),
        ladder=(),
        step_index=0,
        idempotency_key="k",
        replacement_operation_id=None,
        new_node=new_node,
        hold_reason=None,
        error=None,
        attempts=0,
        next_attempt_at=None,
        version=1,
        created_at=NOW,
        updated_at=NOW,
        finished_at=None,
    )


def unvalidated(name: str) -> Signal:
    return Signal(node=name, kind=SignalKind.UNVALIDATED, source="nodes", observed_at=NOW)


def test_machines_a_replacement_brought_are_left_to_its_validation() -> None:
    xid = Signal(node="brought", kind=SignalKind.XID, code=79, source="t", observed_at=NOW)
    signals = [unvalidated("brought"), unvalidated("scaled-up"), xid]
    pools = {"brought": "p", "scaled-up": "p"}
    validating = record(State.VALIDATING, "p", "brought")
    kept = without_brought_machines(signals, [validating], pools)
    assert [(s.node, s.kind) for s in kept] == [
        ("scaled-up", SignalKind.UNVALIDATED),
        ("brought", SignalKind.XID),
    ]
    # A replacement that has not named its machine yet: any new node of its pool may be it.
    replacing = record(State.REPLACING, "p", None)
    assert without_brought_machines(signals, [replacing], pools) == [xid]
    elsewhere = replace(replacing, pool="q")
    assert len(without_brought_machines(signals, [elsewhere], pools)) == 3
