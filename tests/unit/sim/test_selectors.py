"""Label and field selectors: the string grammar and matching rules of the real API server."""

from __future__ import annotations

import pytest

from remediator.sim.kube.api.selectors import parse_field_selector, parse_label_selector
from remediator.sim.kube.api.store import BadRequest

LABELS = {"app": "trainer", "tier": "gpu", "gen": "3", "simcloud.io/nodepool": "pool-a"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", True),
        ("app=trainer", True),
        ("app==trainer", True),
        ("app=other", False),
        ("app!=other", True),
        ("missing!=x", True),
        ("app in (trainer, infer)", True),
        ("app notin (trainer)", False),
        ("missing notin (x)", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("gen>2", True),
        ("gen<3", False),
        ("app>2", False),
        ("simcloud.io/nodepool=pool-a,tier=gpu", True),
        ("simcloud.io/nodepool=pool-a,tier=cpu", False),
        ("app=trainer,!missing,tier in (gpu)", True),
        ("empty=", False),
    ],
)
def test_label_selector_matches(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is expected


def test_empty_value_matches_empty_label() -> None:
    assert parse_label_selector("empty=").matches({"empty": ""})


@pytest.mark.parametrize(
    "selector",
    ["app in trainer", "app=trainer extra", "=x", "app in (a", "gen>x", "bad key=1", "a=b/c"],
)
def test_label_selector_rejects_bad_syntax(selector: str) -> None:
    with pytest.raises(BadRequest):
        parse_label_selector(selector)


POD = {
    "metadata": {"name": "p1", "namespace": "ml"},
    "spec": {"nodeName": "gpu-1", "hostNetwork": False},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=gpu-1", True),
        ("spec.nodeName==gpu-1", True),
        ("spec.nodeName!=gpu-1", False),
        ("spec.nodeName=gpu-1,status.phase=Running", True),
        ("spec.nodeName=gpu-1,status.phase!=Running", False),
        ("metadata.name=p1,metadata.namespace=ml", True),
        ("spec.hostNetwork=false", True),
        ("status.podIP=", True),
    ],
)
def test_field_selector_on_pods(selector: str, expected: bool) -> None:
    assert parse_field_selector(selector, "pods").matches(POD) is expected


def test_field_selector_rejects_unsupported_fields() -> None:
    with pytest.raises(BadRequest, match=r"field label not supported: spec\.nodeName"):
        parse_field_selector("spec.nodeName=x", "nodes")
    with pytest.raises(BadRequest):
        parse_field_selector("status.phase", "pods")


def test_field_selector_exact_name() -> None:
    assert parse_field_selector("metadata.name=gpu-3", "nodes").exact_name() == "gpu-3"
    assert parse_field_selector("metadata.name!=gpu-3", "nodes").exact_name() is None
    node = {"metadata": {"name": "n"}, "spec": {"unschedulable": True}}
    assert parse_field_selector("spec.unschedulable=true", "nodes").matches(node)


def test_event_fields() -> None:
    event = {
        "involvedObject": {"kind": "Node", "name": "gpu-1"},
        "reason": "Cordoned",
        "source": {"component": "remediator"},
        "type": "Normal",
    }
    sel = parse_field_selector(
        "involvedObject.kind=Node,involvedObject.name=gpu-1,source=remediator,type=Normal", "events"
    )
    assert sel.matches(event)
