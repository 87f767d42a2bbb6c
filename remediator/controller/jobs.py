"""The leader's periodic work as APScheduler 3 jobs.

A scheduler exists only while this replica leads: it is built on winning the lease and shut down
on losing it, with an in-memory job store of its own (3.x job stores must never be shared). Each
job runs at most one instance at a time and coalesces missed runs, so a slow cycle delays the next
one instead of stacking up behind it. Pushed signals wake the `push` job at once, and the
`advance` job runs when the engine's earliest wait ends or a watch event ends one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

PUSH_JOB = "push"
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
