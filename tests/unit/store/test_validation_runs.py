"""A rack's validation read as one run per tray (store/validations.py `per_node`)."""

from __future__ import annotations

from datetime import UTC, datetime

from remediator.store.validations import ValidationRun, per_node, validation_figures

AT = datetime(2026, 12, 2, tzinfo=UTC)


def runs_of(detail: dict[str, object], passed: bool) -> tuple[ValidationRun, ...]:
    return tuple(ValidationRun(1, "gb200", AT, p, d) for d, p in per_node(detail, passed))


def test_a_single_node_validation_is_one_run_as_before() -> None:
    detail = {"node": "n1", "new_machine": True, "inventory": {"driver": "550"}}
    assert per_node(detail, True) == [(detail, True)]


def test_a_rack_of_new_trays_counts_every_tray_and_its_own_verdict() -> None:
    trays = [{"node": f"t{i:02d}", "passed": i != 3, "reason": "x"} for i in range(18)]
    detail = {
        "rack": "rack-0",
        "node": "t03",  # the first that failed: its facts are the event's
        "new_machine": True,
        "provider": "http",
        "gpu_model": "NVIDIA GB200",
        "inventory": {"driver": "570"},
        "checks": [{"check": "nccl", "seconds": 2.0, "passed": False}],
        "trays": trays,
    }
    runs = runs_of(detail, False)
    assert [r.node for r in runs] == [f"t{i:02d}" for i in range(18)]
    assert [r.passed for r in runs].count(False) == 1 and not runs[3].passed
    assert runs[3].inventory == {"driver": "570"} and runs[0].inventory == {}
    assert all(r.new_machine and r.detail["provider"] == "http" for r in runs)
    figures = validation_figures(runs)
    assert (figures.overall.new_machines, figures.overall.failed) == (18, 1)
    assert [(c.check, c.count) for c in figures.check_times] == [("nccl", 1)]
