"""Keyset cursors: where the previous page ended, so the next page starts right after.

A cursor names a phase (`all`, or `open` then `closed` when in-flight rows come first) and the
(created_at, id) of the last row shown; ids break ties, so pages never overlap or skip rows.
Whether a row is open changes while someone pages, so the in-flight-first phases also carry
`as_of`, the time the first page was read: rows are split into open and closed as they stood
then (from the append-only timeline), and rows created later wait for a fresh first page.

Its text is a grammar the API states as a pattern (`LIST_PATTERN`, `POSITION_PATTERN`), times in
microseconds since the epoch: every string that matches is a position a page can start from, so
a request the schema allows is never refused for its cursor. Clients still pass back what they
were handed rather than build one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, cast

Phase = Literal["all", "open", "closed"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
# 16 digits of microseconds either side of the epoch (1653 to 2286) and 18 of id (below
# BIGINT's 2**63): bounded so that no cursor the pattern allows overflows a time or a column.
_TIME = r"-?\d{1,16}"
_POSITION = rf"\.{_TIME}\.\d{{1,18}}"
# `all` never has an as-of time, `open` and `closed` always do; empty is the first page.
LIST_PATTERN = rf"^(?:all(?:{_POSITION})?|(?:open|closed)(?:{_POSITION})?~{_TIME})?$"
# A cursor that names a row (the node's signals, newest first), or empty.
POSITION_PATTERN = rf"^(?:all{_POSITION})?$"
MAX_LENGTH = 64
_GRAMMAR = re.compile(
    rf"(?P<phase>all|open|closed)(?:\.(?P<at>{_TIME})\.(?P<id>\d{{1,18}}))?(?:~(?P<as_of>{_TIME}))?"
)


class InvalidCursor(ValueError):
    """The text is not a cursor (the API's pattern refuses it before it gets here)."""


@dataclass(frozen=True)
class Cursor:
    phase: Phase
    created_at: datetime | None
    id: int | None
    as_of: datetime | None = None


def _micros(when: datetime) -> str:
    return str((when - EPOCH) // MICROSECOND)


def _time(text: str) -> datetime:
    return EPOCH + int(text) * MICROSECOND


def encode(cursor: Cursor) -> str:
    token: str = cursor.phase
    if cursor.created_at is not None and cursor.id is not None:
        token += f".{_micros(cursor.created_at)}.{cursor.id}"
    if cursor.as_of is not None:
        token += f"~{_micros(cursor.as_of)}"
    return token


def decode(token: str) -> Cursor:
    found = _GRAMMAR.fullmatch(token)
    if found is None or (found["phase"] == "all") != (found["as_of"] is None):
        raise InvalidCursor(f"invalid cursor {token!r}")
    at, row_id, as_of = found["at"], found["id"], found["as_of"]
    return Cursor(
        cast(Phase, found["phase"]),
        _time(at) if at is not None else None,
        int(row_id) if row_id is not None else None,
        _time(as_of) if as_of is not None else None,
    )
