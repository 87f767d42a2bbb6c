"""Every check bounded: each runs in its own thread and is given up on after its bound, reported
as a failure that says what it was trying. A check that raises is a failure with the error."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from remediator.doctor.report import Finding, Report, Status

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Check:
    area: str
    tried: str  # what it asks, named in a timeout ("GET /version and a SelfSubjectAccessReview…")
    run: Callable[[], list[Finding]]


def run_checks(checks: Sequence[Check], timeout: float = DEFAULT_TIMEOUT) -> Report:
    """All checks at once, each within `timeout` seconds, findings in the checks' order."""
    results: dict[int, list[Finding]] = {}
    threads = []
    for index, check in enumerate(checks):
        thread = threading.Thread(
            target=_one, args=(check, results, index), name=f"doctor {check.area}", daemon=True
        )
        thread.start()
        threads.append(thread)
    findings: list[Finding] = []
    for index, (check, thread) in enumerate(zip(checks, threads, strict=True)):
        thread.join(timeout)
        found = results.get(index)
        if found is None:
            findings.append(
                Finding(
                    check.area,
                    "answers in time",
                    Status.FAIL,
                    f"timed out after {timeout:g}s: {check.tried}",
                    "make it answer from where the controller runs (address, network policy, "
                    "proxy, DNS, credentials), or give a slow system more time with --timeout",
                )
            )
        else:
            findings.extend(found)
    return Report(tuple(findings))


def _one(check: Check, results: dict[int, list[Finding]], index: int) -> None:
    try:
        results[index] = check.run()
    except Exception as exc:  # a check's own bug or an unwrapped library error: still a line
        results[index] = [
            Finding(
                check.area,
                "runs",
                Status.FAIL,
                f"{check.tried}: {type(exc).__name__}: {exc}",
                "see the error above",
            )
        ]
