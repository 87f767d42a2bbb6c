from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediator.store.cursor import (
    LIST_PATTERN,
    MAX_LENGTH,
    POSITION_PATTERN,
    Cursor,
    InvalidCursor,
    decode,
    encode,
)


@pytest.mark.parametrize(
    "cursor",
    [
        Cursor("all", datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), 42),
        Cursor("all", None, None),
        Cursor("open", None, None, datetime(2026, 1, 2, tzinfo=UTC)),
        Cursor("closed", datetime(2026, 1, 1, tzinfo=UTC), 7, datetime(2026, 1, 2, tzinfo=UTC)),
        Cursor(
            "closed",
            datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))),
            2**40,
            datetime(2026, 1, 2, tzinfo=UTC),
        ),
        Cursor("all", datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=UTC), 0),
    ],
)
def test_round_trip_in_the_published_grammar(cursor: Cursor) -> None:
    token = encode(cursor)
    assert re.fullmatch(LIST_PATTERN, token) and len(token) <= MAX_LENGTH
    assert decode(token) == cursor


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.one_of(st.from_regex(p, fullmatch=True) for p in (LIST_PATTERN, POSITION_PATTERN)))
def test_every_text_the_schema_allows_is_a_cursor(token: str) -> None:
    """#39 item 23: the API's schema said any printable text up to 512 characters, the server
    refused all but its own base64; now the pattern is the grammar, so a request the schema
    allows is never refused for its cursor."""
    assert len(token) <= MAX_LENGTH
    if not token:
        return  # the first page: the API reads an empty cursor as none
    cursor = decode(token)
    assert decode(encode(cursor)) == cursor
    for when in (cursor.created_at, cursor.as_of):
        assert when is None or when.astimezone(UTC).year >= 1653


@pytest.mark.parametrize(
    "token",
    [
        "not a cursor",
        "WyJhbGwiLCIyMDI2LTAxLTAxVDAwOjAwOjAwKzAwOjAwIiw3XQ",  # the old base64 JSON
        "sideways.1.2",
        "all.1",
        "all~5",  # `all` has no as-of time
        "open.1.2",  # `open` and `closed` have one
        "all.1.1234567890123456789",  # 19 digits of id: past BIGINT
        "all.12345678901234567.1",  # 17 digits of time: past year 2286
    ],
)
def test_rejects_other_texts(token: str) -> None:
    with pytest.raises(InvalidCursor):
        decode(token)
