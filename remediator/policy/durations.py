"""Durations as people write them in policies ("90s", "2m", "1h30m", "7d") and back again."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PATTERN = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> timedelta:
    """Parse units in descending order only, so "1h30m" is accepted and "30m1h" is a typo."""
    match = _PATTERN.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise ValueError(f"invalid duration {text!r}: expected e.g. 90s, 2m, 1h30m, 7d")
    seconds = sum(
        int(part) * factor
        for part, factor in zip(match.groups(), _UNITS.values(), strict=True)
        if part is not None
    )
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest spelling parse_duration reads back to the same value."""
    remaining = int(value.total_seconds())
    if remaining == 0:
        return "0s"
    parts = []
    for unit, factor in _UNITS.items():
        amount, remaining = divmod(remaining, factor)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def _coerce(value: Any) -> timedelta:
    # Bare numbers are refused on purpose: "for: 90" could mean seconds or minutes.
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f"invalid duration {value!r}: expected a string such as 90s, 2m, 7d")
    return parse_duration(value)


Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce),
    PlainSerializer(format_duration, return_type=str),
]
