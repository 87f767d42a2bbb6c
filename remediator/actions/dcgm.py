"""Reading `dcgmi diag -r N -j` output (DCGM 3.x layout, docs/repair.md): every test's verdict
per GPU. Tolerant of missing optional keys, since the layout moved between DCGM releases; an
output with no test results at all is unreadable, never a pass."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ROOT = "DCGM GPU Diagnostic"


class DiagUnreadable(ValueError):
    """The output is not a DCGM diagnostic report."""


@dataclass(frozen=True)
class TestVerdict:
    category: str
    test: str
    gpu: str | None  # None for a test of the whole node
    status: str  # Pass, Fail, Warn, Skip
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, "")}


@dataclass(frozen=True)
class DiagReport:
    verdicts: tuple[TestVerdict, ...]
    version: str | None = None
    driver: str | None = None

    @property
    def failures(self) -> tuple[TestVerdict, ...]:
        return tuple(v for v in self.verdicts if v.status.lower() == "fail")

    @property
    def passed(self) -> bool:
        return not self.failures


def _text(raw: Any) -> str:
    """`warnings`/`info` are a string, a list of strings, or a list of {"warning": …}."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Mapping):
        return str(raw.get("warning") or raw.get("message") or raw.get("info") or "")
    if isinstance(raw, list):
        return "; ".join(t for t in (_text(item) for item in raw) if t)
    return str(raw)


def parse_diag(output: str) -> DiagReport:
    start = output.find("{")
    if start < 0:
        raise DiagUnreadable("no JSON object in the dcgmi output")
    try:
        document, _ = json.JSONDecoder().raw_decode(output[start:])
    except ValueError as exc:
        raise DiagUnreadable(f"the dcgmi output is not JSON: {exc}") from exc
    diag = document.get(ROOT) if isinstance(document, Mapping) else None
    if not isinstance(diag, Mapping):
        raise DiagUnreadable(f'no "{ROOT}" object in the dcgmi output')
    verdicts: list[TestVerdict] = []
    for category in diag.get("test_categories") or ():
        if not isinstance(category, Mapping):
            continue
        name = str(category.get("category") or "")
        for test in category.get("tests") or ():
            if not isinstance(test, Mapping):
                continue
            for result in test.get("results") or ():
                if not isinstance(result, Mapping) or "status" not in result:
                    continue
                gpu = result.get("gpu_ids", result.get("gpu_id"))
                detail = _text(result.get("warnings")) or _text(result.get("info"))
                verdicts.append(
                    TestVerdict(
                        name,
                        str(test.get("name") or ""),
                        None if gpu is None else str(gpu),
                        str(result["status"]),
                        detail,
                    )
                )
    if not verdicts:
        raise DiagUnreadable("the dcgmi output names no test result")
    version = diag.get("version")
    driver = document.get("Driver Version Detected")
    return DiagReport(
        tuple(verdicts),
        str(version) if version is not None else None,
        str(driver) if driver is not None else None,
    )
