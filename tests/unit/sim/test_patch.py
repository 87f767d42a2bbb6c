"""Patch semantics: RFC 6902, RFC 7386, and strategic merge with Kubernetes' merge keys."""

from __future__ import annotations

import copy

import pytest

from remediator.sim.kube.api.patch import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    apply_patch,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from remediator.sim.kube.api.store import BadRequest, Invalid, Obj, UnsupportedMediaType


def node() -> Obj:
    return {
        "metadata": {"name": "gpu-1", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
        "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "GpuHealthy", "status": "True"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }


def test_merge_patch_rfc7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": None}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {}}
    assert target["c"] == {"d": "e", "f": "g"}


def test_json_patch_all_operations() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    ops = [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "replace", "path": "/c", "value": "y"},
        {"op": "copy", "from": "/c", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e"},
        {"op": "remove", "path": "/a/b/1"},
        {"op": "test", "path": "/e", "value": "y"},
        {"op": "add", "path": "/m~1n", "value": True},
    ]
    assert json_patch(doc, ops) == {"a": {"b": [0, 2, 3]}, "c": "y", "e": "y", "m/n": True}
    assert doc == {"a": {"b": [1, 2]}, "c": "x"}


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/c", "value": "other"}],
        [{"op": "remove", "path": "/nope"}],
        [{"op": "replace", "path": "/nope", "value": 1}],
        [{"op": "add", "path": "/a/b/9", "value": 1}],
        [{"op": "add", "path": "/x/y", "value": 1}],
    ],
)
def test_json_patch_failures_are_invalid(ops: list[Obj]) -> None:
    with pytest.raises(Invalid):
        json_patch({"a": {"b": [1]}, "c": "x"}, ops)


def test_json_patch_malformed_is_bad_request() -> None:
    with pytest.raises(BadRequest):
        json_patch({}, {"op": "add"})
    with pytest.raises(BadRequest):
        json_patch({}, [{"op": "frobnicate", "path": "/a"}])


def test_strategic_conditions_merge_on_type() -> None:
    patch = {
        "status": {"conditions": [{"type": "GpuHealthy", "status": "False", "reason": "Xid79"}]}
    }
    out = strategic_merge_patch("nodes", node(), patch)
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "GpuHealthy", "status": "False", "reason": "Xid79"},
    ]
    added = strategic_merge_patch(
        "nodes", node(), {"status": {"conditions": [{"type": "IbHealthy", "status": "True"}]}}
    )
    assert [c["type"] for c in added["status"]["conditions"]] == [
        "Ready",
        "GpuHealthy",
        "IbHealthy",
    ]


def test_strategic_taints_are_replaced_whole() -> None:
    patch = {"spec": {"taints": [{"key": "k2", "effect": "NoExecute"}], "unschedulable": True}}
    out = strategic_merge_patch("nodes", node(), patch)
    assert out["spec"] == {"taints": [{"key": "k2", "effect": "NoExecute"}], "unschedulable": True}


def test_strategic_delete_directives() -> None:
    patch = {
        "metadata": {"labels": {"a": None}, "$deleteFromPrimitiveList/finalizers": ["x"]},
        "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]},
    }
    out = strategic_merge_patch("nodes", node(), patch)
    assert out["metadata"]["labels"] == {"b": "2"}
    assert out["metadata"]["finalizers"] == []
    assert [c["type"] for c in out["status"]["conditions"]] == ["GpuHealthy"]


def test_strategic_replace_directives_and_order() -> None:
    out = strategic_merge_patch(
        "nodes", node(), {"metadata": {"labels": {"$patch": "replace", "c": "3"}}}
    )
    assert out["metadata"]["labels"] == {"c": "3"}
    reordered = strategic_merge_patch(
        "nodes",
        node(),
        {
            "status": {
                "$setElementOrder/conditions": [{"type": "GpuHealthy"}, {"type": "Ready"}],
                "conditions": [{"type": "Ready", "status": "False"}],
            }
        },
    )
    assert [(c["type"], c["status"]) for c in reordered["status"]["conditions"]] == [
        ("GpuHealthy", "True"),
        ("Ready", "False"),
    ]


def test_strategic_pod_containers_merge_on_name() -> None:
    pod = {
        "spec": {
            "containers": [
                {"name": "a", "image": "i1", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "i2"},
            ],
            "tolerations": [{"key": "t1"}],
        }
    }
    patch = {
        "spec": {
            "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}],
            "tolerations": [{"key": "t2"}],
        }
    }
    out = strategic_merge_patch("pods", copy.deepcopy(pod), patch)
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "X", "value": "1"},
        {"name": "Y", "value": "2"},
    ]
    assert out["spec"]["containers"][1] == {"name": "b", "image": "i2"}
    assert out["spec"]["tolerations"] == [{"key": "t2"}]


def test_strategic_missing_merge_key_is_rejected() -> None:
    with pytest.raises(BadRequest, match="merge key"):
        strategic_merge_patch("nodes", node(), {"status": {"conditions": [{"status": "True"}]}})


def test_apply_patch_dispatches_on_content_type() -> None:
    patch = {"spec": {"unschedulable": True}}
    for kind in (MERGE_PATCH, STRATEGIC_MERGE_PATCH + "; charset=utf-8"):
        assert apply_patch("nodes", kind, node(), patch)["spec"]["unschedulable"] is True
    ops = [{"op": "add", "path": "/spec/unschedulable", "value": True}]
    assert apply_patch("nodes", JSON_PATCH, node(), ops)["spec"]["unschedulable"] is True
    with pytest.raises(UnsupportedMediaType):
        apply_patch("nodes", "application/apply-patch+yaml", node(), patch)
