"""Maintenance windows: when planned work may touch a pool (`windows:` in settings.yaml).

A window opens on a crontab schedule (five fields, read by APScheduler's CronTrigger in the
window's own time zone, so "0 2 * * 6" is 02:00 local on Saturdays across daylight saving) and
stays open for `duration`. Planned remediations act only inside one of their pool's windows;
urgent faults never look at them. The functions here are pure: the caller passes `now`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from remediator.policy.durations import Duration

LONGEST_WINDOW = timedelta(days=7)
# `window: pool` in a policy's `when:` means the windows of the node's own pool.
POOL_WINDOW = "pool"


def cron_trigger(start: str, timezone: str) -> CronTrigger:
    """The window's opening schedule; ValueError (with the reason) for a bad expression."""
    if len(start.split()) != 5:
        raise ValueError(
            f"start {start!r}: expected five crontab fields (minute hour day month weekday), "
            "e.g. '0 2 * * 6'"
        )
    try:
        return CronTrigger.from_crontab(start, timezone=ZoneInfo(timezone))
    except (ValueError, KeyError) as exc:
        raise ValueError(f"start {start!r}: {exc}") from exc


class MaintenanceWindow(BaseModel):
    """`start` a crontab expression, `duration` how long each opening lasts, `timezone` an IANA
    name the expression is read in, `pools` the node pools whose planned work it admits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: str
    duration: Duration
    timezone: str = "UTC"
    pools: list[str] = Field(min_length=1)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r} (an IANA name, e.g. UTC)") from exc
        return value

    @field_validator("pools")
    @classmethod
    def _pools(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("a pool is listed twice")
        return value

    @field_validator("duration")
    @classmethod
    def _length(cls, value: timedelta) -> timedelta:
        if not timedelta(minutes=1) <= value <= LONGEST_WINDOW:
            raise ValueError("duration must be between 1m and 7d")
        return value

    @model_validator(mode="after")
    def _schedule(self) -> MaintenanceWindow:
        cron_trigger(self.start, self.timezone)
        return self

    def trigger(self) -> CronTrigger:
        return cron_trigger(self.start, self.timezone)


@dataclass(frozen=True, slots=True)
class Opening:
    """One opening of a named window, [start, end)."""

    window: str
    start: datetime
    end: datetime

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def first_opening(name: str, window: MaintenanceWindow, after: datetime) -> Opening | None:
    """The earliest opening still open at or after `after` (it may have started before)."""
    trigger = window.trigger()
    # An opening that started up to `duration` ago is still open at `after`.
    since = after - window.duration + timedelta(seconds=1)
    start = trigger.get_next_fire_time(None, since)
    if start is None:
        return None
    return Opening(name, start, start + window.duration)


def openings(
    windows: Mapping[str, MaintenanceWindow], names: Iterable[str], after: datetime, until: datetime
) -> list[Opening]:
    """Every opening of the named windows that is open somewhere in [after, until], by start."""
    found: list[Opening] = []
    for name in names:
        window = windows[name]
        current = first_opening(name, window, after)
        while current is not None and current.start <= until:
            found.append(current)
            current = first_opening(name, window, current.end)
    return sorted(found, key=lambda o: (o.start, o.window))


def pool_windows(windows: Mapping[str, MaintenanceWindow], pool: str | None) -> list[str]:
    """The names of the windows assigned to `pool` (none: planned work has no window there)."""
    return sorted(name for name, w in windows.items() if pool is not None and pool in w.pools)
