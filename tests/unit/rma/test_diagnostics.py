"""The DCGM runs an RMA bundle gives the vendor (#39): the runs that failed and name the GPU at
fault (or no GPU), a repaired node's failed validation included; a passing run, another GPU's
failure and a replacement's burn-in are not evidence of this fault."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from remediator.rma import bundle
from remediator.store.records import EventRecord
from tests.unit.rma.test_rma import T0, UUID, _record


def line(n: int, action: str, detail: dict[str, Any]) -> EventRecord:
    return EventRecord(n, 7, T0 + timedelta(minutes=n), None, None, action, detail, "c")


def dcgm_rows(gpu: str, status: str) -> list[dict[str, str]]:
    return [{"test": "GPU Memory", "gpu": gpu, "status": status}]


def test_only_failed_runs_that_name_the_gpu_or_none_are_evidence() -> None:
    events = (
        line(1, "diagnose_done", {"tests": dcgm_rows("1", "Pass")}),
        line(2, "diagnose_failed", {"reason": "level 2", "tests": dcgm_rows("3", "Fail")}),
        line(3, "diagnose_failed", {"reason": "level 2", "tests": dcgm_rows("0,1", "Fail")}),
        line(4, "diagnose_failed", {"reason": "no report: the Job's log is not DCGM's"}),
        line(5, "diagnose_held", {"reason": "gave up after 30 attempts"}),
        line(6, "validate_failed", {"new_machine": True, "checks": [{"check": "dcgm"}]}),
        line(
            7,
            "validate_failed",
            {
                "new_machine": False,
                "checks": [
                    {"check": "inventory", "passed": True},
                    {"check": "dcgm", "passed": False, "failed": dcgm_rows("1", "Fail")},
                ],
            },
        ),
    )
    built = bundle.build(
        case={"id": 3, "target": "gpu", "hardware_id": UUID},
        hardware=bundle.Hardware(),
        remediations=[_record(events)],
        gpu_index=1,
        built_at=T0 + timedelta(hours=1),
    )
    runs = [(d["action"], d["step"], d["failed_tests"]) for d in built["diagnostics"]]
    assert runs == [
        ("diagnose_failed", "diagnose", dcgm_rows("0,1", "Fail")),
        ("diagnose_failed", "diagnose", []),
        ("validate_failed", "validate", dcgm_rows("1", "Fail")),
    ]
    assert built["diagnostics"][2]["result"]["check"] == "dcgm"
    # The machine's case: every failed run of its own, another GPU's too.
    machine = bundle.build(
        case={"id": 4, "target": "machine", "hardware_id": "dmi:SN-1"},
        hardware=bundle.Hardware(),
        remediations=[_record(events)],
        gpu_index=None,
        built_at=T0 + timedelta(hours=1),
    )
    assert [d["at"] for d in machine["diagnostics"]] == [
        (T0 + timedelta(minutes=n)).isoformat() for n in (2, 3, 4, 7)
    ]
