"""The doctor's frame: every check bounded (a timeout is a failure naming what it tried), a
check that raises is a failure, and the exit status is the worst finding's."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from remediator.doctor.report import Finding, Report, Status
from remediator.doctor.runner import Check, run_checks


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # lets the abandoned check's thread end


def test_a_check_that_outlasts_its_bound_fails_naming_what_it_tried(
    release: threading.Event,
) -> None:
    def hangs() -> list[Finding]:
        release.wait()
        return [Finding("prometheus", "reachable", Status.PASS, "late")]

    report = run_checks(
        [
            Check("prometheus", "instant queries at http://10.0.0.1:9090", hangs),
            Check("nodes", "list nodes", lambda: [Finding("nodes", "pools", Status.PASS, "2")]),
        ],
        timeout=0.2,
    )
    timed_out, listed = report.findings
    assert timed_out.status is Status.FAIL and timed_out.area == "prometheus"
    assert timed_out.found == "timed out after 0.2s: instant queries at http://10.0.0.1:9090"
    assert "--timeout" in timed_out.fix
    assert listed.status is Status.PASS
    assert report.exit_code == 2


def test_a_check_that_raises_is_a_failure_with_the_error() -> None:
    def broken() -> list[Finding]:
        raise KeyError("config")

    (finding,) = run_checks([Check("alertmanager", "GET /api/v2/status", broken)]).findings
    assert finding.status is Status.FAIL
    assert finding.found == "GET /api/v2/status: KeyError: 'config'"


@pytest.mark.parametrize(
    ("states", "code"),
    [
        ((Status.PASS, Status.SKIP), 0),
        ((Status.PASS, Status.WARN, Status.SKIP), 1),
        ((Status.WARN, Status.FAIL), 2),
    ],
)
def test_exit_status_is_the_worst_finding(states: tuple[Status, ...], code: int) -> None:
    report = Report(tuple(Finding("a", f"c{i}", s, "x", "do y") for i, s in enumerate(states)))
    assert report.exit_code == code
    assert json.loads(report.to_json())["exit_code"] == code
    text = report.to_text()
    assert text.splitlines()[-1].startswith(report.status.value)
    assert text.count("fix: do y") == sum(1 for s in states if s is not Status.PASS)
