"""The pure opt-out decisions (model/optout.py): which target a request names, which requests
are refused and why, which recorded opt-outs still protect a node, when a hold goes to on-call,
and how a pod label's set time is read (managedFields, else the pod's creation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.errors import PolicyError
from remediator.kube.objects import Pod
from remediator.model.optout import (
    OptOutRecord,
    OptOutRefused,
    Scope,
    Target,
    check_request,
    escalation_due,
    holding,
    label_hold,
    parse_target,
)
from remediator.policy.loader import load_policy_dir

NOW = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
WEEK = timedelta(days=7)
REPO_ROOT = Path(__file__).resolve().parents[3]


def record(i: int, scope: Scope, target: str, until: datetime, **extra: object) -> OptOutRecord:
    return OptOutRecord(
        id=i,
        cluster="c",
        scope=scope,
        target=target,
        actor="alice",
        reason="eval run",
        since=NOW - timedelta(hours=1),
        until=until,
        **extra,  # type: ignore[arg-type]
    )


def test_a_request_names_exactly_one_well_formed_target() -> None:
    assert parse_target("gpu-1", None, None) == Target(Scope.NODE, "gpu-1")
    assert parse_target(None, "team-a/train-0", None) == Target(Scope.POD, "team-a/train-0")
    assert parse_target(None, None, "1234_5") == Target(Scope.SLURM_JOB, "1234_5")
    for node, pod, job in [
        (None, None, None),
        ("gpu-1", "a/b", None),
        ("GPU_1", None, None),
        (None, "no-slash", None),
        (None, "a/b/c", None),
        (None, None, "12a"),
        ("  ", None, None),
    ]:
        with pytest.raises(OptOutRefused):
            parse_target(node, pod, job)


def test_no_reason_or_an_expiry_beyond_the_maximum_is_refused_with_the_reason() -> None:
    assert check_request("  eval run ", NOW, NOW + timedelta(hours=6), WEEK) == "eval run"
    with pytest.raises(OptOutRefused, match="a reason is required"):
        check_request("   ", NOW, NOW + timedelta(hours=6), WEEK)
    with pytest.raises(OptOutRefused, match="a reason is required"):
        check_request(None, NOW, NOW + timedelta(hours=6), WEEK)
    with pytest.raises(OptOutRefused, match=r"at most 7d \(max_opt_out\); 8d asked"):
        check_request("x", NOW, NOW + timedelta(days=8), WEEK)
    with pytest.raises(OptOutRefused, match="not in the future"):
        check_request("x", NOW, NOW, WEEK)
    with pytest.raises(OptOutRefused, match="one line"):
        check_request("a\nb", NOW, NOW + timedelta(hours=1), WEEK)
    assert check_request("x", NOW, NOW + WEEK, WEEK) == "x"  # exactly the maximum is allowed


def test_an_opt_out_protects_until_its_expiry_and_not_a_moment_after() -> None:
    node = record(1, Scope.NODE, "gpu-1", NOW + timedelta(seconds=5))
    assert holding([node], NOW, node="gpu-1").active == (node,)
    at_expiry = holding([node], NOW + timedelta(seconds=5), node="gpu-1")
    assert at_expiry.active == () and at_expiry.expired == (node,)
    assert node.state(NOW) == "active" and node.state(NOW + timedelta(seconds=5)) == "expired"


def test_only_opt_outs_on_this_node_its_pods_or_its_jobs_concern_it() -> None:
    until = NOW + timedelta(hours=1)
    mine = [
        record(1, Scope.NODE, "gpu-1", until),
        record(2, Scope.POD, "team/p", until),
        record(3, Scope.SLURM_JOB, "77", until),
    ]
    others = [
        record(4, Scope.NODE, "gpu-2", until),
        record(5, Scope.POD, "team/q", until),
        record(6, Scope.SLURM_JOB, "78", until),
        record(7, Scope.NODE, "gpu-1", until, removed_at=NOW, removed_by="bob"),
    ]
    found = holding([*mine, *others], NOW, node="gpu-1", pods=["team/p"], jobs=["77"])
    assert [r.id for r in found.active] == [1, 2, 3] and found.expired == ()
    jobs_only = holding(mine, NOW, node=None, jobs=["77"])
    assert [r.id for r in jobs_only.active] == [3]


def test_a_hold_goes_to_on_call_once_when_it_outlasts_max_opt_out_hold() -> None:
    day = timedelta(hours=24)
    assert not escalation_due(NOW, NOW + day, day, escalated=False)
    assert escalation_due(NOW, NOW + day + timedelta(seconds=1), day, escalated=False)
    assert not escalation_due(NOW, NOW + 2 * day, day, escalated=True)


def test_a_label_is_shown_with_no_owner_no_expiry_and_where_its_set_time_came_from() -> None:
    created = NOW - timedelta(days=3)
    labelled = NOW - timedelta(days=2, hours=5)
    from_fields = label_hold("team/p", labelled, created)
    assert from_fields.describe() == (
        "team/p: label, no expiry, set since 2026-11-29T23:00:00+00:00 (from the pod's "
        "managedFields)"
    )
    assert from_fields.age(NOW) == "2d5h"
    from_creation = label_hold("team/p", None, created)
    assert from_creation.source == "creation time" and from_creation.age(NOW) == "3d"
    unknown = label_hold("team/p", None, None)
    assert unknown.age(NOW) is None and "set time unknown" in unknown.describe()


def test_the_label_set_time_is_the_newest_managed_fields_entry_that_owns_it() -> None:
    label = "remediator.io/disable-auto-replace"
    pod = Pod.from_json(
        {
            "metadata": {
                "namespace": "team",
                "name": "p",
                "uid": "u",
                "creationTimestamp": "2026-11-20T10:00:00Z",
                "labels": {label: "true", "app": "x"},
                "managedFields": [
                    {
                        "manager": "kubectl-create",
                        "operation": "Update",
                        "apiVersion": "v1",
                        "time": "2026-11-20T10:00:00Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
                    },
                    {
                        "manager": "kubectl-label",
                        "operation": "Update",
                        "apiVersion": "v1",
                        "time": "2026-11-28T09:30:00Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {f"f:{label}": {}}}},
                    },
                    {
                        "manager": "kubelet",
                        "operation": "Update",
                        "apiVersion": "v1",
                        "time": "2026-11-29T00:00:00Z",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:status": {"f:phase": {}}},
                        "subresource": "status",
                    },
                ],
            }
        }
    )
    assert pod.label_set_at[label] == datetime(2026, 11, 28, 9, 30, tzinfo=UTC)
    assert pod.label_set_at["app"] == datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
    bare = Pod.from_json({"metadata": {"namespace": "team", "name": "q", "uid": "v"}})
    assert bare.label_set_at == {}


def test_the_policy_settings_bound_opt_outs_and_a_bad_value_is_a_file_line_error(
    tmp_path: Path,
) -> None:
    policies = REPO_ROOT / "policies"
    for name in ("gpu-lost.yaml", "settings.yaml"):
        (tmp_path / name).write_text((policies / name).read_text())
    loaded = load_policy_dir(tmp_path).settings
    assert (loaded.max_opt_out, loaded.max_opt_out_hold) == (WEEK, timedelta(hours=24))
    text = (tmp_path / "settings.yaml").read_text()
    line = text.splitlines().index("max_opt_out_hold: 24h") + 1
    (tmp_path / "settings.yaml").write_text(
        text.replace("max_opt_out_hold: 24h", "max_opt_out_hold: 0s")
    )
    with pytest.raises(PolicyError) as refused:
        load_policy_dir(tmp_path)
    assert refused.value.problems == [
        f"settings.yaml:{line}: max_opt_out_hold: must be longer than 0s"
    ]
