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


def test_the_controllers_asked_period_is_kept_when_longer_than_the_agents_own() -> None:
    pacing = Pacing(period=10.0)
    middle = lambda a, b: (a + b) / 2  # noqa: E731
    assert pacing.delay(0, None, middle, asked=250.0) == 250.0
    assert pacing.delay(0, None, middle, asked=2.0) == 10.0  # never faster than its own
    assert pacing.delay(0, None, middle, asked=1e9) == 3600.0  # a broken answer is bounded
    # After failures the backoff decides, from the agent's own period.
    assert pacing.delay(1, None, lambda _a, b: b, asked=250.0) == 20.0


def test_the_asked_period_is_read_from_a_200_answer_only_when_sane() -> None:
    assert judge(200, {}, '{"recorded": true, "next_heartbeat_seconds": 250.0}').asked == 250.0
    assert judge(200, {}, '{"recorded": true}').asked is None  # an older controller
    for text in ("<html>proxy</html>", '{"next_heartbeat_seconds": -1}', "[1]", "", "null"):
        assert judge(200, {}, text) == Beat(True), text
    assert judge(200, {}, '{"next_heartbeat_seconds": true}').asked is None
