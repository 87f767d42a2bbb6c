from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest

from remediator.store.cursor import Cursor, InvalidCursor, decode, encode


@pytest.mark.parametrize(
    "cursor",
    [
        Cursor("all", datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), 42),
        Cursor("open", None, None),
        Cursor("open", None, None, datetime(2026, 1, 2, tzinfo=UTC)),
        Cursor("closed", datetime(2026, 1, 1, tzinfo=UTC), 7, datetime(2026, 1, 2, tzinfo=UTC)),
        Cursor("closed", datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))), 2**40),
    ],
)
def test_round_trip(cursor: Cursor) -> None:
    token = encode(cursor)
    assert "=" not in token
    assert decode(token) == cursor


def _token(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode()


@pytest.mark.parametrize(
    "token",
    [
        "not base64 at all!",
        _token("{}"),
        _token('["sideways", null, null]'),
        _token('["all", "2026-01-01T00:00:00+00:00", null]'),
        _token('["all", "2026-01-01T00:00:00+00:00", "7"]'),
        _token('["all", "2026-01-01T00:00:00", 7]'),
        _token('["all", "yesterday", 7]'),
        _token('["open", null, null, "2026-01-01T00:00:00"]'),
        _token('["open", null, null, "2026-01-01T00:00:00+00:00", 1]'),
    ],
)
def test_rejects_foreign_tokens(token: str) -> None:
    with pytest.raises(InvalidCursor):
        decode(token)
