"""The fleet figures' daily rollups give, on every read, what computing each remediation afresh
gives: finished days built once, open remediations and today computed each time, a retried
failure rebuilding its day, and a failed one's GPU-hours still growing."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import func, select

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.db import session_scope
from remediator.store.fleet import fault_rows
from remediator.store.fleet_rollups import Figures, FleetRollups, Tally, tally
from remediator.store.models import FleetRollup, FleetRollupDay
from remediator.store.records import NewRemediation
from remediator.store.repository import Repository, quarantine_spans

pytestmark = pytest.mark.integration

DAY0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MODEL = "NVIDIA H100 80GB HBM3"


def _new(node: str, pool: str = "train", model: str = MODEL) -> NewRemediation:
    signal = Signal(
        node=node,
        kind=SignalKind.XID,
        source="dcgm",
        observed_at=DAY0,
        gpu=0,
        code=79,
        labels={"modelName": model},
    )
    return NewRemediation(
        node=node,
        policy="xid-fatal",
        reason="XID 79",
        signals=[signal],
        ladder=[{"action": "cordon"}, {"action": "replace"}],
        pool=pool,
    )


Seen = tuple[dict[tuple[str, str, str], tuple[object, ...]], dict[tuple[str, date], int]]


def _afresh(repo: Repository, first: date, now: datetime) -> Seen:
    """The figures from every remediation and its timeline, no rollup."""
    since = datetime.combine(first, datetime.min.time(), UTC)
    rows = fault_rows(repo.session_factory, ["alpha"], since, now + timedelta(seconds=1))
    spans = {s.remediation_id: s for s in quarantine_spans(repo.session_factory, ["alpha"], since)}
    figures = Figures()
    for key, found in tally(rows, spans).items():
        figures.add(key, found)
    return _seen(figures, now)


def _seen(figures: Figures, now: datetime) -> Seen:
    return {group: _tally(t, now) for group, t in figures.groups.items()}, figures.daily


def _tally(found: Tally, now: datetime) -> tuple[object, ...]:
    return (
        found.faults,
        found.repaired,
        found.replaced,
        sorted(found.repairs),
        round(found.lost(now), 6),
        round(found.disrupted(now), 6),
    )


def _rolled(rollups: FleetRollups, first: date, now: datetime) -> Seen:
    return _seen(rollups.figures(["alpha"], first, now), now)


def _markers(repo: Repository) -> dict[date, list[int]]:
    with session_scope(repo.session_factory) as session:
        return {row.day: list(row.pending) for row in session.scalars(select(FleetRollupDay))}


def test_rollups_answer_what_the_remediations_do_at_every_step(
    migrated_database_url: str,
) -> None:
    engine = db.make_engine(migrated_database_url)
    clock = FakeClock(DAY0)
    repo = Repository(db.make_session_factory(engine), "alpha", clock)
    rollups = FleetRollups(repo.session_factory)
    actor = "controller alpha-0"

    def quarantine(rid: int) -> None:
        repo.transition(rid, State.DETECTED, State.QUARANTINED, action="cordon", actor=actor)

    # Day 0: one replaced after 30 min (8 GPUs), one failed (8 GPUs, out of service until a
    # human acts), one still open.
    done = repo.create(_new("n-1"), actor=actor).id
    quarantine(done)
    failed = repo.create(_new("n-2"), actor=actor).id
    quarantine(failed)
    still = repo.create(_new("n-3"), actor=actor).id
    quarantine(still)
    clock.advance(1800)
    repo.transition(
        done,
        State.QUARANTINED,
        State.SUCCEEDED,
        action="replaced",
        actor=actor,
        detail={"gpus": 8},
        outcome="replaced",
    )
    repo.transition(
        failed, State.QUARANTINED, State.FAILED, action="fail", actor=actor, detail={"gpus": 8}
    )
    # Day 1: one in another pool and model, repaired after an hour.
    clock.advance(24 * 3600 - 1800)
    other = repo.create(_new("n-5", pool="infer", model="NVIDIA B200"), actor=actor).id
    quarantine(other)
    clock.advance(3600)
    repo.transition(
        other,
        State.QUARANTINED,
        State.SUCCEEDED,
        action="repaired",
        actor=actor,
        detail={"gpus": 8},
        outcome="repaired",
    )
    # Day 2: today, one open.
    clock.advance(24 * 3600 - 3600)
    today = repo.create(_new("n-4"), actor=actor).id
    quarantine(today)
    first = DAY0.date()

    now = clock.now()
    assert _rolled(rollups, first, now) == _afresh(repo, first, now)
    # Day 0 and day 1 (no faults) are summed whole, today up to an hour ago (before its one
    # remediation, read afresh); day 0's open one is pending.
    assert _markers(repo) == {first: [still], first + timedelta(days=1): [], now.date(): []}

    # Hours later the failed one's GPU-hours have grown, from the same rollup.
    clock.advance(5 * 3600)
    now = clock.now()
    assert _rolled(rollups, first, now) == _afresh(repo, first, now)
    # Today's cover moved on: its remediation, still open, is pending now.
    assert _markers(repo)[now.date()] == [today]
    key = ("alpha", "train", MODEL)
    assert (
        _rolled(rollups, first, now)[0][key][4]
        > _rolled(rollups, first, now - timedelta(hours=1))[0][key][4]
    )
    # Summed across days per group, and per day for the chart.
    assert _rolled(rollups, first, now)[1] == {
        ("alpha", first): 3,
        ("alpha", first + timedelta(days=1)): 1,
        ("alpha", now.date()): 1,
    }

    # The pending one ends: read afresh by id, the day is not rebuilt.
    repo.transition(
        still,
        State.QUARANTINED,
        State.SUCCEEDED,
        action="repaired",
        actor=actor,
        detail={"gpus": 8},
        outcome="repaired",
    )
    assert _rolled(rollups, first, now) == _afresh(repo, first, now)

    # Today's open one evicts a pod of 4 GPUs: its timeline grew, so the span the rollups kept
    # for it is read again.
    assert _rolled(rollups, first, now)[0][key][5] == 0.0
    evicted = {"pod": "ns/train-0", "uid": "u-1", "gpus": 4, "state": "evicted"}
    evicted["evicted_at"] = (now - timedelta(hours=1)).isoformat()
    repo.append_event(today, action="drain", actor=actor, detail={"pods": [evicted]})
    assert _rolled(rollups, first, now) == _afresh(repo, first, now)
    assert _rolled(rollups, first, now)[0][key][5] == 4.0

    # A human retries the failure: its day's marker goes in the same transaction, and the day
    # is built again with the retried one pending.
    repo.transition(failed, State.FAILED, State.QUARANTINED, action="retry", actor="ana")
    assert first not in _markers(repo)
    assert _rolled(rollups, first, now) == _afresh(repo, first, now)
    assert _markers(repo)[first] == [failed]
    with session_scope(repo.session_factory) as session:
        groups = session.scalar(
            select(func.count()).select_from(FleetRollup).where(FleetRollup.day == first)
        )
    assert groups == 1
    engine.dispose()


def test_a_day_that_changes_between_the_read_and_the_write_is_not_written(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry that drops a day's marker while a console is reading that day: the console's
    snapshot still holds the retried one as failed, so it must not write that day back."""
    engine = db.make_engine(migrated_database_url)
    clock = FakeClock(DAY0)
    repo = Repository(db.make_session_factory(engine), "alpha", clock)
    rollups = FleetRollups(repo.session_factory)
    actor = "controller alpha-0"
    first = DAY0.date()
    rid = repo.create(_new("n-1"), actor=actor).id
    repo.transition(rid, State.DETECTED, State.QUARANTINED, action="cordon", actor=actor)
    clock.advance(1800)
    repo.transition(
        rid, State.QUARANTINED, State.FAILED, action="fail", actor=actor, detail={"gpus": 8}
    )
    clock.advance(3 * 3600)
    assert _rolled(rollups, first, clock.now()) == _afresh(repo, first, clock.now())
    assert _markers(repo) == {first: []}  # summed up to an hour ago, the failure in its rows

    clock.advance(1800)  # the day's cover moves on the next read
    read_spans = rollups._spans_of

    def retried_meanwhile(ids: list[int]) -> dict[int, object]:
        repo.transition(rid, State.FAILED, State.QUARANTINED, action="retry", actor="ana")
        repo.transition(
            rid,
            State.QUARANTINED,
            State.SUCCEEDED,
            action="repaired",
            actor=actor,
            detail={"gpus": 8},
            outcome="repaired",
        )
        monkeypatch.setattr(rollups, "_spans_of", read_spans)
        return read_spans(ids)

    monkeypatch.setattr(rollups, "_spans_of", retried_meanwhile)
    rollups.figures(["alpha"], first, clock.now())
    assert first not in _markers(repo)  # the retry's drop stands

    now = clock.now()
    assert _rolled(rollups, first, now) == _afresh(repo, first, now)
    assert _rolled(rollups, first, now)[0][("alpha", "train", MODEL)][1] == 1  # repaired
    engine.dispose()
