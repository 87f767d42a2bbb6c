"""What the Prometheus source's narrowed queries leave of a stream of readings, in Python: the
rule ReadingFilter.promql encodes (tested against a real Prometheus in
tests/integration/test_prometheus_source.py), applied to batches in time order."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from datetime import datetime
from typing import Protocol, TypeVar

from remediator.signals.interest import Interest
from remediator.signals.model import SignalKind


class Reading(Protocol):
    @property
    def kind(self) -> SignalKind: ...

    @property
    def value(self) -> float | None: ...


class Narrowing:
    """Per series, the samples seen so far; `keep` answers as Prometheus would at `now`."""

    def __init__(self, interest: Interest) -> None:
        self.interest = interest
        self._samples: dict[Hashable, list[tuple[datetime, float]]] = {}

    def keep(self, series: Hashable, reading: Reading, now: datetime) -> bool:
        if not self.interest.wants(reading.kind):
            return False  # a kind no policy matches is not queried at all
        narrowed = self.interest.readings.get(reading.kind)
        if narrowed is None or reading.value is None:
            return True
        samples = self._samples.setdefault(series, [])
        samples.append((now, reading.value))
        recent = [v for t, v in samples if t > now - narrowed.recent]
        return narrowed.keeps(reading.value, recent)


R = TypeVar("R", bound=Reading)


def narrow(
    batches: Sequence[tuple[datetime, Sequence[tuple[Hashable, R]]]], interest: Interest
) -> list[list[R]]:
    """Each batch (time, [(series key, reading)]) as the narrowed answer would hold it."""
    narrowing = Narrowing(interest)
    return [
        [reading for key, reading in batch if narrowing.keep(key, reading, now)]
        for now, batch in batches
    ]
