from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remediator.store.stats import percentile, step_durations, summarise

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_percentile_interpolates_between_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 0.5) == 2.5
    assert percentile(values, 0.9) == pytest.approx(3.7)
    assert percentile(values, 1.0) == 4.0
    assert percentile([7.0], 0.9) == 7.0


def test_percentile_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_summarise_sorts_and_counts() -> None:
    assert summarise([]) is None
    summary = summarise([10.0, 1.0, 5.0])
    assert summary is not None
    assert (summary.count, summary.median_seconds) == (3, 5.0)
    assert summary.p90_seconds == pytest.approx(9.0)


def test_step_durations_measure_each_stay() -> None:
    def at(seconds: int) -> datetime:
        return T0 + timedelta(seconds=seconds)

    rows = [
        (1, at(0), None, "detected"),
        (1, at(2), "detected", "quarantined"),
        (1, at(12), "quarantined", "draining"),
        (1, at(72), "draining", "succeeded"),
        (2, at(5), None, "detected"),
        (2, at(6), "detected", "quarantined"),
        (2, at(10), "quarantined", "succeeded"),
    ]
    assert step_durations(rows) == {
        "detected": [2.0, 1.0],
        "quarantined": [10.0, 4.0],
        "draining": [60.0],
    }
