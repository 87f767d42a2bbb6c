"""The heartbeat's pacing: spread around the period; after a failure, retries spread within the
reconnect window for its first two thirds, then the period (doubling to the cap when longer);
and a server's Retry-After obeyed (never shortened)."""

from __future__ import annotations

import heapq
import random
import statistics
from collections import Counter

from remediator.agent.heartbeat import Beat, Pacing, judge


def test_steady_intervals_are_spread_around_the_period() -> None:
    pacing = Pacing(period=10.0)
    draws = [pacing.delay(0, None, random.Random(seed).uniform) for seed in range(2_000)]
    assert min(draws) >= 8.0 and max(draws) <= 12.0
    assert abs(statistics.mean(draws) - 10.0) < 0.2  # the steady rate stays one per period
    assert len({round(d, 3) for d in draws}) > 1_000  # not in step


LOW = lambda a, _b: a  # noqa: E731 - the lower edge of each draw
HIGH = lambda _a, b: b  # noqa: E731


def test_a_failed_agent_of_a_large_fleet_is_back_within_the_reconnect_window() -> None:
    pacing = Pacing(period=10.0, reconnect=55.0)
    for failing_for in (0.0, 20.0, 36.0):  # retried while the failure is young
        assert pacing.delay(1, None, LOW, asked=250.0, failing_for=failing_for) == 55.0 / 3
        assert pacing.delay(3, None, HIGH, asked=250.0, failing_for=failing_for) == 55.0
    # Past two thirds of the window it keeps the asked period: never faster than steady.
    assert pacing.delay(4, None, LOW, asked=250.0, failing_for=37.0) == 200.0
    assert pacing.delay(4, None, HIGH, asked=250.0, failing_for=600.0) == 300.0


def test_a_restart_brings_the_failed_agents_back_in_time_without_a_storm() -> None:
    """10,000 agents at a 250 s period, a controller down 20 s: every agent that failed is
    answered within the window of its return, and no 5 s carries twice the steady rate."""
    pacing, period, agents, down, up = Pacing(), 250.0, 10_000, 1_000.0, 1_020.0
    rng = random.Random(24)
    due = [(rng.uniform(0, period), n) for n in range(agents)]
    heapq.heapify(due)
    since: dict[int, float] = {}
    failures: dict[int, int] = {}
    back: dict[int, float] = {}
    sent: Counter[int] = Counter()
    while due and due[0][0] < up + 400:
        at, node = heapq.heappop(due)
        sent[int(at)] += 1
        if down <= at < up:
            failures[node] = failures.get(node, 0) + 1
            since.setdefault(node, at)
            wait = pacing.delay(failures[node], None, rng.uniform, period, at - since[node])
        else:
            if node in since and node not in back:
                back[node] = at - up
            wait = pacing.delay(0, None, rng.uniform, period)
        heapq.heappush(due, (at + wait, node))
    assert len(since) > 700 and set(back) == set(since)
    assert max(back.values()) <= pacing.reconnect
    busiest = max(sum(sent[s] for s in range(t, t + 5)) / 5 for t in range(int(down), 1_400))
    assert busiest <= 2 * agents / period


def test_a_small_fleets_agent_backs_off_from_its_period_to_the_cap() -> None:
    pacing = Pacing(period=10.0, cap=30.0)
    assert pacing.delay(1, None, LOW) == 10.0 / 3  # young failure: within one period
    assert pacing.delay(1, None, HIGH) == 10.0
    late = 40.0  # past two thirds of the reconnect window
    assert [pacing.delay(n, None, HIGH, failing_for=late) for n in (1, 2, 3, 20)] == [
        24.0,
        36.0,
        36.0,
        36.0,
    ]
    # A controller down for long sees each agent less often than steady.
    assert min(pacing.delay(n, None, LOW, failing_for=late) for n in range(2, 30)) >= 24.0


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
    # A young failure is retried within the reconnect window, not the asked period.
    assert pacing.delay(1, None, lambda _a, b: b, asked=250.0) == pacing.reconnect


def test_the_asked_period_is_read_from_a_200_answer_only_when_sane() -> None:
    assert judge(200, {}, '{"recorded": true, "next_heartbeat_seconds": 250.0}').asked == 250.0
    assert judge(200, {}, '{"recorded": true}').asked is None  # an older controller
    for text in ("<html>proxy</html>", '{"next_heartbeat_seconds": -1}', "[1]", "", "null"):
        assert judge(200, {}, text) == Beat(True), text
    assert judge(200, {}, '{"next_heartbeat_seconds": true}').asked is None
