"""Asking Prometheus only for what policies could act on changes no decision.

The source narrows reading kinds to values at or beyond each kind's lowest relevant level, plus
series that were there within the longest gap (so the low reading that ends a streak still
arrives). These tests run the same readings through evaluate twice — every reading, and only
the narrowed ones, with evaluate skipped for an empty cycle as the intake skips it — and demand
the same decisions: over random policies and readings (hypothesis), and over every shipped
policy scenario.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediator.policy.evaluate import EvalState, History, evaluate
from remediator.policy.interest import interest_of
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.policy.scenario import (
    Scenario,
    SignalSpec,
    TimelineEntry,
    load_scenarios,
    run_scenario,
)
from remediator.policy.schema import GlobalSettings, Policy
from remediator.remediation.walk import walk
from remediator.signals.interest import ReadingFilter
from remediator.signals.model import Signal, SignalKind
from tests.unit.policy.builders import at, policy
from tests.unit.policy.narrowing import narrow

POLICIES_DIR = Path(__file__).resolve().parents[3] / "policies"
SERIES = [("n1", 0, "a"), ("n1", 1, "b"), ("n2", 0, "a")]


def test_interest_of_the_shipped_policies() -> None:
    interest = interest_of(load_policy_dir(POLICIES_DIR).policies)
    assert interest.kinds is not None and SignalKind.THERMAL in interest.kinds
    thermal = interest.readings[SignalKind.THERMAL]
    assert (thermal.at_least, thermal.at_most) == (75.0, None)  # gpu-overheat clears at 75
    assert thermal.recent == timedelta(minutes=3)  # its 2m gap and a minute's margin
    # The stale-sample bound follows the thermal policies' `for`, not node conditions' 10m.
    assert interest.shortest_for[SignalKind.THERMAL] == timedelta(minutes=2)


def test_a_policy_acting_on_any_reading_keeps_the_kind_whole() -> None:
    hot = policy("hot", {"kind": "thermal", "threshold": {"above": 80}})
    anything = policy("any", {"kind": "thermal"})
    assert SignalKind.THERMAL in interest_of([hot]).readings
    assert SignalKind.THERMAL not in interest_of([hot, anything]).readings
    low = policy("cold", {"kind": "thermal", "threshold": {"below": 10, "clear": 15}})
    both = interest_of([hot, low]).readings[SignalKind.THERMAL]
    assert (both.at_least, both.at_most) == (80.0, 15.0)


def test_the_promql_keeps_series_hot_within_the_window() -> None:
    narrowed = ReadingFilter(at_least=75.0, at_most=None, recent=timedelta(minutes=3))
    assert narrowed.promql("DCGM_FI_DEV_GPU_TEMP") == (
        "(DCGM_FI_DEV_GPU_TEMP) and (max_over_time(DCGM_FI_DEV_GPU_TEMP[180s]) >= 75.0)"
    )
    assert "[180s:]" in narrowed.promql("max by (gpu) (DCGM_FI_DEV_GPU_TEMP)")
    assert narrowed.keeps(60.0, [80.0, 60.0]) and not narrowed.keeps(60.0, [70.0, 60.0])


# -- the property ---------------------------------------------------------------------------


@st.composite
def thermal_policies(draw: st.DrawFn) -> list[Policy]:
    found = []
    for index in range(draw(st.integers(min_value=1, max_value=3))):
        above = draw(st.integers(min_value=70, max_value=85))
        threshold: dict[str, Any] = {
            "above": above,
            "for": draw(st.sampled_from(["0s", "30s", "1m", "2m"])),
            "gap": draw(st.sampled_from(["30s", "1m", "2m"])),
        }
        clear = draw(st.one_of(st.none(), st.integers(min_value=above - 8, max_value=above)))
        if clear is not None:
            threshold["clear"] = clear
        match: dict[str, Any] = {"kind": "thermal", "threshold": threshold}
        if draw(st.booleans()):
            match["labels"] = {"model": draw(st.sampled_from(["a", "b"]))}
        found.append(policy(f"p{index}", match, priority=draw(st.integers(0, 100))))
    return found


@st.composite
def timelines(draw: st.DrawFn) -> list[tuple[float, list[tuple[int, float]]]]:
    """Ticks (seconds since start, [(series index, °C)]); a series may miss a tick."""
    ticks = []
    now = 0.0
    for _ in range(draw(st.integers(min_value=3, max_value=25))):
        now += draw(st.sampled_from([5.0, 15.0, 30.0, 45.0, 90.0]))
        present = [
            (i, draw(st.floats(min_value=55, max_value=95, allow_nan=False)))
            for i in range(len(SERIES))
            if draw(st.integers(0, 4)) > 0
        ]
        ticks.append((now, present))
    return ticks


def run(policies: list[Policy], batches: list[list[Signal]], times: list[float]) -> list[Any]:
    state = EvalState()
    out: list[Any] = []
    for batch, seconds in zip(batches, times, strict=True):
        if not batch:  # the intake does not evaluate an empty cycle
            out.append(())
            continue
        history = History.build(state=state)
        result = evaluate(batch, history, policies, at(seconds), GlobalSettings())
        state = result.state
        out.append(
            tuple(
                (d.node, d.policy, d.reason, tuple((s.gpu, s.value) for s in d.signals))
                for d in result.decisions
            )
        )
    return out


@settings(max_examples=300, deadline=None)
@given(policies=thermal_policies(), ticks=timelines())
def test_narrowed_and_whole_readings_give_the_same_decisions(
    policies: list[Policy], ticks: list[tuple[float, list[tuple[int, float]]]]
) -> None:
    batches = []
    for seconds, present in ticks:
        readings = []
        for index, value in present:
            node, gpu, model = SERIES[index]
            reading = Signal(
                node=node,
                kind=SignalKind.THERMAL,
                source="prometheus",
                observed_at=at(seconds),
                gpu=gpu,
                value=value,
                labels={"model": model},
            )
            readings.append((index, reading))
        batches.append((at(seconds), readings))
    times = [seconds for seconds, _ in ticks]
    whole = [[r for _, r in batch] for _, batch in batches]
    narrowed = narrow(batches, interest_of(policies))
    assert run(policies, narrowed, times) == run(policies, whole, times)


# -- the scenario suite ---------------------------------------------------------------------


def narrowed_scenario(scenario: Scenario, policy_set: PolicySet) -> Scenario:
    """The scenario with each tick's signals cut to what the narrowed queries would answer."""
    ticks: dict[timedelta, list[SignalSpec]] = {}
    resolve: dict[timedelta, list[str]] = {}
    for step in scenario.timeline:
        for offset in step.times():
            ticks.setdefault(offset, []).extend(step.signals)
            resolve.setdefault(offset, []).extend(step.resolve)
    order = sorted(ticks)
    batches = [
        (
            scenario.start + offset,
            [
                ((s.node, s.kind, s.gpu, s.code, tuple(sorted(s.labels.items()))), s)
                for s in ticks[offset]
            ],
        )
        for offset in order
    ]
    kept = narrow(batches, interest_of(policy_set.policies))
    timeline = [
        TimelineEntry(at=offset, signals=list(specs), resolve=resolve[offset])
        for offset, specs in zip(order, kept, strict=True)
    ]
    return scenario.model_copy(update={"timeline": timeline})


SCENARIO_FILES = sorted((POLICIES_DIR / "tests").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.stem)
def test_every_shipped_scenario_decides_the_same_on_narrowed_readings(path: Path) -> None:
    policy_set = load_policy_dir(POLICIES_DIR)
    for scenario in load_scenarios(path):
        whole = run_scenario(scenario, policy_set, walk)
        narrowed = run_scenario(narrowed_scenario(scenario, policy_set), policy_set, walk)
        assert [o.actual for o in narrowed] == [o.actual for o in whole], scenario.name
        assert all(o.passed for o in narrowed), [o.line() for o in narrowed if not o.passed]
