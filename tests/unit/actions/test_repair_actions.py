"""Pure parts of the repair steps: reading `dcgmi diag -j` (the simulator's document and a
sparser DCGM layout), judging a reboot by the boot id, rendering the Job from its template."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from remediator.actions.dcgm import DiagUnreadable, parse_diag
from remediator.actions.jobs import DEFAULT_TEMPLATE, JobSettings, render_job
from remediator.actions.outcome import Done, Failed, Waiting
from remediator.actions.reboot import judge_reboot
from remediator.errors import PermanentError
from remediator.kube.objects import Node, NodeCondition
from remediator.sim.node.programs import diag_report

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_simulated_report_parses_with_every_verdict() -> None:
    output = "Successfully ran diagnostic.\n" + json.dumps(diag_report(2, 4, {1: "XID 79"}))
    report = parse_diag(output)
    assert report.version == "3.3.5" and report.driver
    assert not report.passed
    assert {(v.test, v.gpu) for v in report.failures} == {
        ("Page Retirement/Row Remap", "1"),
        ("Inforom", "1"),
        ("PCIe", "1"),
        ("GPU Memory", "1"),
    }
    assert all("XID 79" in v.detail for v in report.failures)
    assert len(report.verdicts) == 7 + 4 * 4


def test_missing_optional_keys_and_string_warnings_are_tolerated() -> None:
    sparse = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "tests": [
                        {
                            "name": "PCIe",
                            "results": [
                                {"gpu_id": "0", "status": "Fail", "warnings": "link degraded"}
                            ],
                        }
                    ]
                },
                {"category": "Deployment", "tests": [{"results": [{"status": "Pass"}]}]},
            ]
        }
    }
    report = parse_diag(json.dumps(sparse))
    assert report.failures[0].gpu == "0" and report.failures[0].detail == "link degraded"
    assert report.version is None and report.driver is None


@pytest.mark.parametrize(
    "output",
    [
        "",
        "Error: unable to connect to host engine",
        '{"other": 1}',
        json.dumps({"DCGM GPU Diagnostic": {"test_categories": []}}),
    ],
)
def test_output_that_is_not_a_report_is_never_a_pass(output: str) -> None:
    with pytest.raises(DiagUnreadable):
        parse_diag(output)


def node(boot_id: str, ready: str) -> Node:
    return Node(
        "n1", "uid", "1", boot_id=boot_id, conditions=(NodeCondition("Ready", ready, "", "", None),)
    )


def test_a_reboot_is_done_once_ready_with_a_new_boot_id() -> None:
    judge = dict(name="n1", boot_id_before="b1", started_at=T0, timeout_seconds=60)
    assert isinstance(judge_reboot(node("b1", "True"), now=T0, **judge), Waiting)  # type: ignore[arg-type]
    assert isinstance(judge_reboot(node("b2", "Unknown"), now=T0, **judge), Waiting)  # type: ignore[arg-type]
    assert isinstance(judge_reboot(node("b2", "True"), now=T0, **judge), Done)  # type: ignore[arg-type]
    late = T0 + timedelta(seconds=61)
    assert isinstance(judge_reboot(node("b1", "True"), now=late, **judge), Failed)  # type: ignore[arg-type]
    assert isinstance(judge_reboot(None, now=T0, **judge), Failed)  # type: ignore[arg-type]


def test_the_job_renders_pinned_privileged_and_the_template_can_be_replaced() -> None:
    settings = JobSettings("ops", "repair-sa", "img:1", DEFAULT_TEMPLATE)
    job = render_job(
        settings,
        name="j1",
        node="n1",
        step="diagnose",
        remediation="7",
        command=["dcgmi", "diag", "-r", "1", "-j"],
    )
    spec = job["spec"]["template"]["spec"]
    assert job["metadata"]["namespace"] == "ops" and spec["nodeName"] == "n1"
    assert spec["serviceAccountName"] == "repair-sa"
    assert spec["containers"][0]["command"] == ["dcgmi", "diag", "-r", "1", "-j"]
    assert spec["containers"][0]["securityContext"]["privileged"] is True
    assert job["spec"]["backoffLimit"] == 0
    custom = JobSettings("ops", "sa", "img", "kind: Job\nmetadata: {name: $name}\nx: $command\n")
    assert render_job(custom, name="j2", node="n", step="s", remediation="1", command=["a"])[
        "x"
    ] == ["a"]
    broken = JobSettings("ops", "sa", "img", "kind: Pod\n")
    with pytest.raises(PermanentError):
        render_job(broken, name="j", node="n", step="s", remediation="1", command=[])
