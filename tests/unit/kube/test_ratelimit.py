"""The shared client-side token bucket: a burst goes at once, then requests wait 1/qps each."""

from __future__ import annotations

import pytest

from remediator.clock import FakeClock
from remediator.kube.ratelimit import Bucket, TokenBucket, wait_seconds


def test_burst_then_qps() -> None:
    clock = FakeClock()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    bucket = TokenBucket(5.0, 3, monotonic=clock.monotonic, sleep=sleep)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.2)
    assert bucket.take() == pytest.approx(0.2)
    clock.advance(10.0)  # idle: the bucket refills, but never beyond the burst
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.2)
    assert bucket.waited_seconds == pytest.approx(0.6)


def test_full_in_says_when_the_burst_is_back() -> None:
    clock = FakeClock()
    bucket = TokenBucket(5.0, 3, monotonic=clock.monotonic, sleep=clock.advance)
    assert bucket.full_in() == 0.0
    bucket.take()
    bucket.take()
    assert bucket.full_in() == pytest.approx(0.4)
    clock.advance(0.4)
    assert bucket.full_in() == pytest.approx(0.0)


def test_concurrent_takers_queue_behind_each_other() -> None:
    # Two requests arriving together with no token wait 1/qps and 2/qps: the debt is shared.
    empty = Bucket(0.0, 0.0)
    after_one, first = wait_seconds(empty, 0.0, 10.0, 5)
    _, second = wait_seconds(after_one, 0.0, 10.0, 5)
    assert (first, second) == (pytest.approx(0.1), pytest.approx(0.2))


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
