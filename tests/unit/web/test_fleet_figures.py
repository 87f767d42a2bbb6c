"""The fleet figures' repair times: a median and p90 as the cluster's own overview computes
them (interpolated between the nearest repairs), so the two pages agree."""

from __future__ import annotations

from datetime import UTC, datetime

from remediator.store.fleet_rollups import Figures, Tally
from remediator.web.fleet_figures import group_figures

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _figures(*repairs: float) -> Figures:
    figures = Figures()
    figures.groups[("alpha", "train", "H100")] = Tally(faults=len(repairs), repairs=list(repairs))
    return figures


def test_the_median_of_two_repairs_is_their_mean() -> None:
    (row,) = group_figures(_figures(1800.0, 600.0), {}, {}, NOW)
    assert row.repair_median_seconds == 1200.0
    assert row.repair_p90_seconds == 1680.0


def test_an_odd_count_has_its_middle_repair_for_median() -> None:
    (row,) = group_figures(_figures(300.0, 900.0, 600.0), {}, {}, NOW)
    assert row.repair_median_seconds == 600.0


def test_no_repair_has_no_median() -> None:
    (row,) = group_figures(_figures(), {}, {}, NOW)
    assert row.repair_median_seconds is None and row.repair_p90_seconds is None
