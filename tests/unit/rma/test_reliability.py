"""Fleet reliability figures: exposure from placements clipped to the window, failures placed
where the GPU sat at the time, MTBF, top offenders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remediator.rma.reliability import YEAR_SECONDS, Exposure, Failure, figures

NOW = datetime(2026, 12, 1, tzinfo=UTC)
YEAR = timedelta(seconds=YEAR_SECONDS)


def placed(gpu: str, model: str, driver: str, start: datetime, end: datetime | None) -> Exposure:
    return Exposure(gpu, "m-" + gpu, model, driver, "96.00", "pool-a", "c1", "n-" + gpu, start, end)


def test_failures_per_gpu_year_by_model_and_driver_with_mtbf_and_offenders() -> None:
    since = NOW - 2 * YEAR
    exposures = [
        # Two H100 GPU-years each in the window (one placed before it: clipped).
        placed("g1", "H100", "550", NOW - 3 * YEAR, None),
        placed("g2", "H100", "535", NOW - 2 * YEAR, None),
        # An A100 that moved on a driver upgrade: a year on each driver.
        placed("g3", "A100", "535", NOW - 2 * YEAR, NOW - YEAR),
        placed("g3", "A100", "550", NOW - YEAR, None),
    ]
    failures = [
        Failure("g1", "m-g1", "c1", "n-g1", NOW - timedelta(days=10)),
        Failure("g1", "m-g1", "c1", "n-g1", NOW - timedelta(days=5)),
        Failure("g1", "m-g1", "c1", "n-g1", NOW - timedelta(days=1)),
        # g3 failed on driver 535, before its upgrade.
        Failure("g3", "m-g3", "c1", "n-g3", NOW - YEAR - timedelta(days=30)),
        # Before the window: not counted.
        Failure("g2", "m-g2", "c1", "n-g2", NOW - 3 * YEAR),
    ]
    f = figures(exposures, failures, since=since, until=NOW)
    assert f.overall.failures == 4
    assert f.overall.gpu_years == pytest.approx(6.0)
    assert f.overall.per_gpu_year == pytest.approx(4 / 6)
    assert f.overall.mtbf_hours == pytest.approx(6 * YEAR_SECONDS / 3600 / 4)
    model = {r.key: r for r in f.by["model"]}
    assert (model["H100"].gpus, model["H100"].failures) == (2, 3)
    assert model["H100"].per_gpu_year == pytest.approx(3 / 4)
    assert model["A100"].per_gpu_year == pytest.approx(1 / 2)
    driver = {r.key: r for r in f.by["driver"]}
    assert driver["535"].failures == 1 and driver["535"].gpu_years == pytest.approx(3.0)
    assert driver["550"].failures == 3 and driver["550"].gpu_years == pytest.approx(3.0)
    assert [r.key for r in f.by["model"]] == ["H100", "A100"], "worst rate first"
    assert [(o.id, o.failures) for o in f.top_gpus] == [("g1", 3), ("g3", 1)]
    assert [o.id for o in f.top_machines] == ["m-g1", "m-g3"]


def test_no_gpu_time_means_no_rate_rather_than_a_division_by_zero() -> None:
    f = figures([], [], since=NOW - YEAR, until=NOW)
    assert (f.overall.per_gpu_year, f.overall.mtbf_hours, f.overall.failures) == (None, None, 0)
