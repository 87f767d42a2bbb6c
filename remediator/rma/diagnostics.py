"""The DCGM diagnostics an RMA bundle hands the vendor: the runs that failed, of every
remediation of the hardware — a `diagnose` step that failed (or held naming failed tests), and
the DCGM check of a validation of the same machine that failed (a repaired node's burn-in; a
new machine's is another machine). For a GPU, only runs whose failures name it (by its index in
that remediation) or name no GPU. A run that passed is no evidence of the fault: it stays on its
remediation's timeline (timelines.json). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from remediator.store.records import EventRecord, RemediationRecord

DIAGNOSE_FAILED, DIAGNOSE_HELD, VALIDATE_FAILED = (
    "diagnose_failed",
    "diagnose_held",
    "validate_failed",
)
DCGM_CHECK = "dcgm"  # actions/burnin.py DCGM


def failed_tests(tests: Iterable[Any]) -> list[Mapping[str, Any]]:
    """The failing rows of DCGM's per-test verdicts (dcgm.TestVerdict.to_json)."""
    return [
        t for t in tests if isinstance(t, Mapping) and str(t.get("status", "")).lower() == "fail"
    ]


def _names(test: Mapping[str, Any]) -> set[int]:
    """The GPU indexes a test's row names (`"1"`, `"1,3"`); none for a test of the machine."""
    parts = str(test.get("gpu") or "").replace(",", " ").split()
    return {int(p) for p in parts if p.isdigit()}


def _run(event: EventRecord) -> tuple[str, Mapping[str, Any], list[Mapping[str, Any]]] | None:
    """(step, DCGM's result, its failing tests) when the line is a failed DCGM run."""
    detail = event.detail
    if event.action in (DIAGNOSE_FAILED, DIAGNOSE_HELD):
        failing = failed_tests(detail.get("tests") or ())
        if event.action == DIAGNOSE_HELD and not failing:
            return None  # held for want of an answer (a Job that never ran), not a failure
        return "diagnose", detail, failing
    if event.action == VALIDATE_FAILED and not detail.get("new_machine"):
        for check in detail.get("checks") or ():
            dcgm = isinstance(check, Mapping) and check.get("check") == DCGM_CHECK
            if dcgm and not check.get("passed"):
                return "validate", check, failed_tests(check.get("failed") or ())
    return None


def failing_runs(
    remediations: Sequence[RemediationRecord], gpu_uuid: str | None, gpu_index: int | None
) -> list[dict[str, Any]]:
    """Oldest first. `gpu_uuid`/`gpu_index`: the GPU at fault (None for a machine); its index in
    each remediation is the one that remediation's signals give it, else `gpu_index`."""
    found: list[dict[str, Any]] = []
    for record in remediations:
        index = next(
            (s.gpu for s in record.signals if s.gpu_uuid == gpu_uuid and s.gpu is not None),
            gpu_index,
        )
        for event in record.events:
            run = _run(event)
            if run is None:
                continue
            step, result, failing = run
            if index is not None and failing:
                named = [_names(t) for t in failing]
                if not any(index in n or not n for n in named):
                    continue  # another GPU's failure
            found.append(
                {
                    "remediation_id": record.id,
                    "at": event.at.isoformat(),
                    "action": event.action,
                    "step": step,
                    "failed_tests": [dict(t) for t in failing],
                    "result": dict(result),
                }
            )
    return sorted(found, key=lambda run: str(run["at"]))
