"""The RMA case's pure parts and its checked inputs: forward-only moves, the bundle and its
archive, the `rma` step as `policy validate` checks it, the `rma` settings with file:line."""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.errors import PolicyError, RemediatorError
from remediator.model.states import State
from remediator.policy.ladder import LadderStep, ladder_from_policy
from remediator.policy.loader import load_policy_dir
from remediator.rma import bundle
from remediator.rma.model import MoveRefused, RmaStatus, age_text, check_move
from remediator.rma.webhook import backoff
from remediator.settings import RmaSettings, load_settings
from remediator.signals.model import Signal, SignalKind
from remediator.store.records import EventRecord, RemediationRecord

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
UUID = "GPU-3f2a9c1e-7b4d-4e8a-9c0f-1a2b3c4d5e6f"


def test_a_case_only_moves_forward_and_a_duplicate_changes_nothing() -> None:
    assert check_move(RmaStatus.OPENED, RmaStatus.ACKNOWLEDGED) is True
    assert check_move(RmaStatus.OPENED, RmaStatus.SHIPPED) is True  # skipping ahead is allowed
    assert check_move(RmaStatus.SHIPPED, RmaStatus.SHIPPED) is False
    with pytest.raises(MoveRefused, match=r"only moves forward .* not back to acknowledged"):
        check_move(RmaStatus.SHIPPED, RmaStatus.ACKNOWLEDGED)
    with pytest.raises(MoveRefused):
        check_move(RmaStatus.CLOSED, RmaStatus.OPENED)


def test_age_reads_in_its_two_largest_units() -> None:
    assert age_text(59) == "0m"
    assert age_text(3 * 3600 + 5 * 60) == "3h 5m"
    assert age_text(2 * 86400 + 7 * 3600) == "2d 7h"


def test_webhook_backoff_doubles_up_to_its_cap_and_never_gives_up() -> None:
    settings = RmaSettings(webhook_url="http://t/x", retry_base_seconds=5, retry_max_seconds=60)
    assert [backoff(n, settings).total_seconds() for n in (1, 2, 3, 4, 5, 50)] == [
        5,
        10,
        20,
        40,
        60,
        60,
    ]


def _record(events: tuple[EventRecord, ...]) -> RemediationRecord:
    signal = Signal(
        node="n1",
        kind=SignalKind.XID,
        source="agent",
        observed_at=T0,
        gpu=1,
        gpu_uuid=UUID,
        code=79,
        labels={"serial": "1652823054567", "modelName": "NVIDIA H100 80GB HBM3"},
    )
    return RemediationRecord(
        id=7,
        cluster="c",
        node="n1",
        pool="p",
        policy="xid-79",
        policy_priority=0,
        policy_commit=None,
        policy_hash=None,
        state=State.HELD,
        dry_run=False,
        approval_required=False,
        reason="xid 79",
        signal_kind="xid",
        xid_code=79,
        signals=(signal,),
        ladder=(),
        step_index=0,
        idempotency_key="k",
        replacement_operation_id=None,
        new_node=None,
        hold_reason=None,
        error=None,
        attempts=0,
        next_attempt_at=None,
        version=1,
        created_at=T0,
        updated_at=T0,
        finished_at=None,
        events=events,
    )


def test_the_bundle_has_every_part_and_the_archive_a_file_for_each() -> None:
    diag = EventRecord(
        1, 7, T0, State.DIAGNOSING, State.FAILED, "diagnose_failed", {"dcgm": {"x": 1}}, "c"
    )
    placements = [{"node": "n1", "from_at": T0.isoformat(), "to_at": None}]
    built = bundle.build(
        case={"id": 3, "hardware_id": UUID},
        hardware=bundle.Hardware({"serial": "1652823054567"}, placements),
        remediations=[_record((diag,))],
        gpu_index=1,
        built_at=T0 + timedelta(minutes=1),
    )
    assert set(bundle.PARTS) <= set(built)
    assert built["hardware"]["reported_by_signals"]["modelName"] == "NVIDIA H100 80GB HBM3"
    assert built["diagnostics"][0]["result"] == {"dcgm": {"x": 1}}
    assert built["xid"] == [f"{T0.isoformat()} n1 xid 79 gpu=1 uuid={UUID} source=agent"]
    data = bundle.archive(built)
    assert data == bundle.archive(built), "the same bundle is the same bytes"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = sorted(m.name for m in tar.getmembers())
        assert names == sorted(f"rma-3/{n}" for n in bundle.PARTS.values())
        member = tar.extractfile("rma-3/placements.json")
        assert member is not None and json.loads(member.read()) == placements


RMA_POLICY = """\
policies:
  - name: lost
    description: fell off the bus
    why: a dead GPU goes back to its vendor
    match: {kind: xid, codes: [79]}
    actions:
      - action: cordon
      - action: drain
      - action: rma
        target: %s
      - action: replace
"""


def test_the_rma_step_is_on_the_ladder_with_its_target(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(RMA_POLICY % "machine")
    (policy,) = load_policy_dir(tmp_path).policies
    ladder = ladder_from_policy(policy.actions)
    assert LadderStep("rma", target="machine") in ladder


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            RMA_POLICY % "rack",
            "a.yaml:10: policies[0].actions[2].target: Input should be 'gpu' or 'machine'",
        ),
        (
            (RMA_POLICY % "gpu").replace("      - action: replace\n", "      - action: uncordon\n"),
            "a.yaml:2: policies[0]: rma sends the hardware back: the ladder cannot uncordon "
            "after it",
        ),
    ],
)
def test_policy_validate_names_a_bad_rma_step_by_file_and_line(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / "a.yaml").write_text(text)
    with pytest.raises(PolicyError) as caught:
        load_policy_dir(tmp_path)
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_a_bad_rma_webhook_setting_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("cluster_name: c\nrma:\n  webhook_url: ftp://tickets/x\n")
    with pytest.raises(RemediatorError) as caught:
        load_settings(path)
    assert f"{path}:3: rma.webhook_url: Value error, must be an http:// or https:// URL" in str(
        caught.value
    )
    path.write_text("rma:\n  webhook_url: https://tickets/x\n  retry_base_seconds: 0\n")
    with pytest.raises(RemediatorError, match=r"config.yaml:3: rma.retry_base_seconds"):
        load_settings(path)
