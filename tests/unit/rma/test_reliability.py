"""Fleet reliability figures: exposure from every GPU's time in service clipped to the window,
failures as fault episodes placed where the GPU sat at the time, MTBF, top offenders, and no
rate below the minimum exposure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remediator.rma.reliability import (
    UNKNOWN,
    YEAR_SECONDS,
    Exposure,
    Failure,
    LiveNode,
    Sighting,
    episodes,
    figures,
    in_service,
    machine_spans,
)

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


def test_remediations_of_one_gpu_close_together_are_one_fault_episode() -> None:
    at = NOW - timedelta(days=3)
    links = [
        Failure("g1", "m1", "c1", "n1", at, 1),
        Failure("g1", "m1", "c1", "n1", at + timedelta(minutes=6), 2),  # a reopened one
        Failure("g1", "m1", "c1", "n1", at + timedelta(minutes=50), 3),  # still the same
        Failure("g2", "m1", "c1", "n1", at + timedelta(minutes=6), 2),  # another GPU: its own
        Failure(None, "m1", "c1", "n1", at, 4),  # the machine's, naming no GPU
        Failure("g1", "m1", "c1", "n1", at + timedelta(days=2), 5),  # a new episode
    ]
    assert [(f.gpu, f.remediation) for f in episodes(links)] == [
        ("g1", 1),
        (None, 4),
        ("g2", 2),
        ("g1", 5),
    ]
    exposures = [placed(g, "H100", "550", NOW - 2 * YEAR, None) for g in ("g1", "g2")]
    assert figures(exposures, links, since=NOW - YEAR, until=NOW).overall.failures == 4


def test_a_gpu_met_at_its_fault_counts_from_its_machine_and_unmet_gpus_count_too() -> None:
    """The ledger met one GPU of a node at its fault, 254 s before its remediation; the node's
    machine was in service for two years, with 8 GPUs. Not 124,204 failures per GPU-year."""
    fault = NOW - timedelta(days=10)
    spans = machine_spans(
        [Sighting("m1", "c1", "n1", NOW - 2 * YEAR), Sighting("m2", "c1", "n2", NOW - YEAR)], []
    )
    met = Exposure("g1", "m1", UNKNOWN, "550", "96.00", "pool-a", "c1", "n1", fault, None, "3")
    live = [
        LiveNode("c1", "n1", "m1", 8, "NVIDIA-H100-80GB-HBM3", "550", "pool-a", None),
        LiveNode("c1", "n2", "m2", 8, "NVIDIA-H100-80GB-HBM3", None, "pool-a", None),
    ]
    exposures = in_service([met], spans, live)
    failure = Failure("g1", "m1", "c1", "n1", fault + timedelta(seconds=254), 1)
    f = figures(exposures, [failure], since=NOW - YEAR, until=NOW)
    assert (f.overall.gpus, f.overall.failures) == (16, 1)
    assert f.overall.gpu_years == pytest.approx(16.0)
    assert f.overall.per_gpu_year == pytest.approx(1 / 16)
    (model,) = f.by["model"]
    assert (model.key, model.gpus, model.failures) == ("NVIDIA-H100-80GB-HBM3", 16, 1)
    # A day of it is too little data: no rate, no MTBF, whatever the failures.
    young = figures(exposures, [failure], since=fault, until=fault + timedelta(days=1))
    assert young.overall.failures == 1 and not young.overall.enough_data
    assert (young.overall.per_gpu_year, young.overall.mtbf_hours) == (None, None)


def test_a_machine_spans_until_another_takes_its_name_it_moves_or_is_replaced() -> None:
    t = [NOW - timedelta(days=d) for d in (40, 30, 20, 10)]
    spans = machine_spans(
        [
            Sighting("m1", "c1", "n1", t[0]),
            Sighting("m2", "c1", "n1", t[1]),  # a new machine under n1
            Sighting("m2", "c1", "n9", t[2]),  # m2 moved to n9
            Sighting("m3", "c1", "n3", t[0]),
        ],
        [Sighting("m3", "c1", "n3", t[3])],  # replaced
    )
    assert sorted((s.machine, s.node, s.from_at, s.to_at) for s in spans) == [
        ("m1", "n1", t[0], t[1]),
        ("m2", "n1", t[1], t[2]),
        ("m2", "n9", t[2], None),
        ("m3", "n3", t[0], t[3]),
    ]
