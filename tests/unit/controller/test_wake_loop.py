"""The push loop runs on a wake, not on a poll interval, and never loses a wake that lands while
it runs."""

from __future__ import annotations

import threading

from remediator.controller.jobs import WakeLoop

NEVER = 3600.0  # a fallback no test waits for: a run can only come from a wake


def test_runs_at_start_then_on_each_wake_without_waiting_for_the_fallback() -> None:
    runs: list[int] = []
    ran = threading.Semaphore(0)

    def func() -> None:
        runs.append(len(runs))
        ran.release()

    loop = WakeLoop("test", func, NEVER)
    loop.start()
    try:
        assert ran.acquire(timeout=30)  # the first run, at start
        loop.wake()
        assert ran.acquire(timeout=30)
        loop.wake()
        assert ran.acquire(timeout=30)
        assert runs == [0, 1, 2]
    finally:
        loop.stop(wait=True)


def test_a_wake_during_a_run_brings_another_run() -> None:
    inside = threading.Event()
    release = threading.Event()
    second = threading.Event()
    calls = 0

    def func() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            inside.set()
            release.wait(30)
        elif calls == 3:
            second.set()

    loop = WakeLoop("test", func, NEVER)
    loop.start()
    try:
        loop.wake()
        assert inside.wait(30)
        loop.wake()  # while the second run is still inside func
        release.set()
        assert second.wait(30)
    finally:
        loop.stop(wait=True)


def test_stop_ends_the_thread_without_waiting_for_the_fallback() -> None:
    started = threading.Event()
    loop = WakeLoop("test", started.set, NEVER)
    loop.start()
    assert started.wait(30)
    stopping = threading.Thread(target=loop.stop, kwargs={"wait": True})
    stopping.start()
    stopping.join(timeout=30)  # stop joins the loop's thread: it returns once that has ended
    assert not stopping.is_alive()
