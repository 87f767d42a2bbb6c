"""What the loaded policies could act on, in terms a source can push into its queries.

A healthy fleet is almost all readings no policy can act on: a GPU at 45 °C matters to no
thermal policy whose lowest level is 75 °C. Asking the backend only for readings at or beyond
each kind's lowest relevant level keeps the controller's work proportional to faults, not to the
fleet. The one thing a missing reading must not change is a running streak: an unfiltered low
reading ends it at once, a missing one would let it live until its gap. So a series that was in
the relevant range within `recent` (longer than every policy's gap) is still read, with its real
value, until it has been out of range that long: the low reading that ends the streak arrives as
it would have unfiltered, and a series that vanished altogether stays as silent as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from remediator.signals.model import SignalKind


@dataclass(frozen=True, slots=True)
class ReadingFilter:
    """Readings at or above `at_least` or at or below `at_most` (None: no bound on that side)
    matter; so does every series that had such a reading within `recent`."""

    at_least: float | None
    at_most: float | None
    recent: timedelta

    def relevant(self, value: float) -> bool:
        return (self.at_least is not None and value >= self.at_least) or (
            self.at_most is not None and value <= self.at_most
        )

    def keeps(self, value: float, recent_values: Iterable[float]) -> bool:
        """Whether the answer holds a series whose sample now is `value` and whose samples
        within `recent` (this one included) were `recent_values`: the rule the PromQL encodes."""
        return self.relevant(value) or any(self.relevant(v) for v in recent_values)

    def condition(self, query: str) -> str:
        """The series of `query` (an instant vector) this filter keeps, as a PromQL vector to
        `and` with whatever is asked of them (their values, their samples' timestamps)."""
        window = f"{max(1, int(self.recent.total_seconds()))}s"
        ranged = f"{query}[{window}]" if _is_selector(query) else f"({query})[{window}:]"
        tests = []
        if self.at_least is not None:
            tests.append(f"max_over_time({ranged}) >= {self.at_least!r}")
        if self.at_most is not None:
            tests.append(f"min_over_time({ranged}) <= {self.at_most!r}")
        return " or ".join(tests)

    def promql(self, query: str) -> str:
        """`query` narrowed to the series this filter keeps."""
        return f"({query}) and ({self.condition(query)})"


@dataclass(frozen=True, slots=True)
class Interest:
    """Which kinds any policy matches (None: all, before a policy set is loaded), per reading
    kind the filter below which nothing could act, and per kind the shortest `for` of its
    policies (a sample older than that must not count as a reading, or it could complete a
    streak alone)."""

    kinds: frozenset[SignalKind] | None = None
    readings: Mapping[SignalKind, ReadingFilter] = field(default_factory=dict)
    shortest_for: Mapping[SignalKind, timedelta] = field(default_factory=dict)

    def wants(self, kind: SignalKind) -> bool:
        return self.kinds is None or kind in self.kinds


EVERYTHING = Interest()


def _is_selector(query: str) -> bool:
    """A bare metric selector (`name` or `name{...}`), which takes a range directly."""
    text = query.strip()
    name, brace, rest = text.partition("{")
    plain = name.replace("_", "a").replace(":", "a").isalnum() and not name[:1].isdigit()
    return plain and (not brace or (rest.endswith("}") and "}" not in rest[:-1]))
