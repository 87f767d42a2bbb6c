"""A doctor's findings: one line per check with what it found and, when it is not a pass, how to
fix it; the exit status CI reads (0 pass, 1 warnings, 2 failures)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum


class Status(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # not configured (optional): no bearing on the exit status


@dataclass(frozen=True)
class Finding:
    area: str  # kubernetes, nodes, prometheus, alertmanager, provider, slurm, database, …
    check: str
    status: Status
    found: str
    fix: str = ""


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]

    @property
    def status(self) -> Status:
        states = {f.status for f in self.findings}
        for worst in (Status.FAIL, Status.WARN):
            if worst in states:
                return worst
        return Status.PASS

    @property
    def exit_code(self) -> int:
        return {Status.FAIL: 2, Status.WARN: 1}.get(self.status, 0)

    def problems(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status in (Status.WARN, Status.FAIL))

    def to_json(self) -> str:
        return json.dumps(
            {
                "status": self.status.value,
                "exit_code": self.exit_code,
                "findings": [asdict(f) for f in self.findings],
            },
            indent=2,
        )

    def to_text(self) -> str:
        lines = []
        for f in self.findings:
            lines.append(f"{f.status.value.upper():4}  {f.area}: {f.check}: {f.found}")
            if f.fix and f.status is not Status.PASS:
                lines.append(f"      fix: {f.fix}")
        counts = {s: sum(1 for f in self.findings if f.status is s) for s in Status}
        lines.append(
            f"{self.status.value}: {counts[Status.PASS]} passed, {counts[Status.WARN]} warnings, "
            f"{counts[Status.FAIL]} failures, {counts[Status.SKIP]} skipped"
        )
        return "\n".join(lines)


def merge(parts: Iterable[Iterable[Finding]]) -> Report:
    return Report(tuple(f for part in parts for f in part))
