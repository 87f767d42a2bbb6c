"""The leader's periodic work as APScheduler 3 jobs.

A scheduler exists only while this replica leads: it is built on winning the lease and shut down
on losing it, with an in-memory job store of its own (3.x job stores must never be shared). Each
job runs at most one instance at a time and coalesces missed runs, so a slow cycle delays the next
one instead of stacking up behind it. The `advance` job runs when the engine's earliest wait ends
or a watch event ends one. Pushed signals are taken by a `WakeLoop` of their own, which sleeps
until a push arrives instead of polling the inbox.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

ADVANCE_JOB = "advance"


@dataclass(frozen=True)
class JobSpec:
    id: str
    func: Callable[[], object]
    seconds: float


def build_scheduler(jobs: list[JobSpec], workers: int = 8) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(workers)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
        timezone=UTC,
    )
    now = datetime.now(UTC)
    for job in jobs:
        scheduler.add_job(
            job.func,
            "interval",
            seconds=job.seconds,
            id=job.id,
            name=job.id,
            next_run_time=now,
        )
    return scheduler


def wake(scheduler: BackgroundScheduler | None, job_id: str) -> None:
    """Run the job now instead of at its next interval (no-op when not leading)."""
    if scheduler is None or not scheduler.running:
        return
    try:
        scheduler.modify_job(job_id, next_run_time=datetime.now(UTC))
    except LookupError:
        return


def wake_at(scheduler: BackgroundScheduler | None, job_id: str, when: datetime) -> None:
    """Run the job at `when` (sooner than its interval would); no-op when not leading."""
    if scheduler is None or not scheduler.running:
        return
    try:
        scheduler.modify_job(job_id, next_run_time=when)
    except LookupError:
        return


class WakeLoop:
    """Runs `func` in a thread of its own once at start, then each time `wake()` is called, and
    at least every `fallback` seconds. A wake that lands while `func` runs is not lost: the
    flag is cleared before `func` starts, so the loop runs again at once. (An APScheduler job
    woken while its one instance is still finishing skips that run until its next interval.)"""

    def __init__(self, name: str, func: Callable[[], object], fallback: float) -> None:
        self._name = name
        self._func = func
        self._fallback = fallback
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wanted.set()

    def stop(self, wait: bool = False) -> None:
        self._stop.set()
        self._wanted.set()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._func()
            self._wanted.wait(self._fallback)
            self._wanted.clear()
