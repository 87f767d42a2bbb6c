"""Why a validation Job cannot run on its node, in that node's terms (steps/validate.not_here):
the scheduler's own message tallies every node of the cluster."""

from __future__ import annotations

from typing import Any

from remediator.actions.jobs import DEFAULT_TEMPLATE, JobSettings, render_job
from remediator.kube.objects import Node, Pod, Taint
from remediator.remediation.steps.validate import not_here

FENCE = Taint("remediator.io/quarantine", "true", "NoSchedule")


def job(template: str = DEFAULT_TEMPLATE, gpus: int = 0) -> dict[str, Any]:
    rendered = render_job(
        JobSettings("remediator", "remediator", "tools:1", template),
        name="remediator-validate-1-0-checks",
        node="n1",
        step="validate",
        remediation="1",
        command=["true"],
    )
    if gpus:
        (container,) = rendered["spec"]["template"]["spec"]["containers"]
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return rendered


def only(tolerations: list[dict[str, Any]], gpus: int = 0) -> dict[str, Any]:
    rendered = job(gpus=gpus)
    rendered["spec"]["template"]["spec"]["tolerations"] = tolerations
    return rendered


def node(*taints: Taint, cordoned: bool = True, gpus: int | None = 8) -> Node:
    return Node(
        name="n1",
        uid="u1",
        resource_version="1",
        unschedulable=cordoned,
        taints=(FENCE, *taints),
        gpus=gpus,
    )


def pod(name: str, gpus: int, phase: str = "Running") -> Pod:
    return Pod(namespace="train", name=name, uid=name, node_name="n1", phase=phase, gpus=gpus)


def test_the_default_template_tolerates_everything_and_asks_no_gpu() -> None:
    dedicated = Taint("dedicated", "training", "NoExecute")
    assert not_here(job(), node(dedicated), [pod("big", 8)]) == ""


def test_an_untolerated_taint_and_the_cordon_are_named() -> None:
    fence_only = [{"key": "remediator.io/quarantine", "operator": "Exists"}]
    why = not_here(only(fence_only), node(Taint("dedicated", "training", "NoSchedule")), [])
    assert why == (
        "the node is cordoned and the Job does not tolerate node.kubernetes.io/unschedulable; "
        "the Job does not tolerate the node's taint dedicated=training:NoSchedule"
    )


def test_tolerations_match_by_key_value_and_effect() -> None:
    taint = Taint("dedicated", "training", "NoSchedule")
    cordon = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
    fence = {"key": "remediator.io/quarantine", "value": "true", "effect": "NoSchedule"}
    base = [cordon, fence]
    assert not_here(only([*base, {"key": "dedicated", "value": "training"}]), node(taint), []) == ""
    assert (
        not_here(only([*base, {"key": "dedicated", "operator": "Exists"}]), node(taint), []) == ""
    )
    wrong_value = [*base, {"key": "dedicated", "value": "inference"}]
    assert "dedicated=training:NoSchedule" in not_here(only(wrong_value), node(taint), [])
    wrong_effect = [*base, {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]
    assert "dedicated=training:NoSchedule" in not_here(only(wrong_effect), node(taint), [])
    soft = Taint("dedicated", "training", "PreferNoSchedule")
    assert not_here(only(base), node(soft), []) == ""


def test_gpus_held_by_other_pods_are_named_with_their_holders() -> None:
    held = [pod("trainer", 6), pod("done", 8, phase="Succeeded"), pod("agent", 0)]
    why = not_here(job(gpus=8), node(), held)
    assert (
        why == "the Job asks 8 nvidia.com/gpu, 2 of the node's 8 free (held by train/trainer (6))"
    )
    assert not_here(job(gpus=2), node(), held) == ""
    assert not_here(job(gpus=1), node(gpus=0), []) == (
        "the Job asks 1 nvidia.com/gpu, 0 of the node's 0 free"
    )
