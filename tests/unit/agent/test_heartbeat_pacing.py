"""The heartbeat's pacing: spread around the period, a jittered doubling backoff after failures
up to its cap, and a server's Retry-After obeyed (never shortened)."""

from __future__ import annotations

import random
import statistics

from remediator.agent.heartbeat import Beat, Pacing, judge


def test_steady_intervals_are_spread_around_the_period() -> None:
    pacing = Pacing(period=10.0)
    draws = [pacing.delay(0, None, random.Random(seed).uniform) for seed in range(2_000)]
    assert min(draws) >= 8.0 and max(draws) <= 12.0
    assert abs(statistics.mean(draws) - 10.0) < 0.2  # the steady rate stays one per period
    assert len({round(d, 3) for d in draws}) > 1_000  # not in step


def test_failures_back_off_with_jitter_up_to_the_cap() -> None:
    pacing = Pacing(period=10.0, cap=30.0)
    low = lambda a, _b: a  # noqa: E731 - the lower edge of each draw
    high = lambda _a, b: b  # noqa: E731
    assert [pacing.delay(n, None, high) for n in (1, 2, 3, 20)] == [20.0, 30.0, 30.0, 30.0]
    assert [pacing.delay(n, None, low) for n in (1, 2, 3, 20)] == [10.0, 15.0, 15.0, 15.0]
    # A controller that is down sees each agent at most once per 10 s: never more than steady.
    assert min(pacing.delay(n, None, low) for n in range(1, 30)) >= pacing.period


def test_a_retry_after_is_obeyed_whole_and_spread() -> None:
    pacing = Pacing(period=10.0)
    assert pacing.delay(1, 7.0, lambda a, _b: a) == 7.0
    assert pacing.delay(1, 7.0, lambda _a, b: b) == 10.5
    assert pacing.delay(0, 45.0, lambda a, _b: a) == 45.0  # beyond the cap: still obeyed


def test_answers_judged() -> None:
    assert judge(200, {}) == Beat(True)
    assert judge(429, {"retry-after": "3"}) == Beat(False, 3.0)
    assert judge(503, {"retry-after": "5"}) == Beat(False, 5.0)
    assert judge(500, {"retry-after": "5"}) == Beat(False, None)
    assert judge(429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == Beat(False, None)
