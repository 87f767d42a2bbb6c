from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediator.policy.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("2m", 120), ("1h30m", 5400), ("7d", 604800), ("1d2h3m4s", 93784), ("0s", 0)],
)
def test_parses_the_written_forms(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "90", "2 m", "30m1h", "1.5h", "-1m", "5w", "m"])
def test_refuses_everything_else(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=10**8))
def test_format_reads_back(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value
