"""Opaque keyset cursors: where the previous page ended, so the next page starts right after.

A cursor names a phase (`all`, or `open` then `closed` when in-flight rows come first) and the
(created_at, id) of the last row shown; ids break ties, so pages never overlap or skip rows.
Whether a row is open changes while someone pages, so the in-flight-first phases also carry
`as_of`, the time the first page was read: rows are split into open and closed as they stood
then (from the append-only timeline), and rows created later wait for a fresh first page.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Phase = Literal["all", "open", "closed"]
PHASES: tuple[Phase, ...] = ("all", "open", "closed")


class InvalidCursor(ValueError):
    """The cursor was not made by `encode` (tampered, truncated or from another version)."""


@dataclass(frozen=True)
class Cursor:
    phase: Phase
    created_at: datetime | None
    id: int | None
    as_of: datetime | None = None


def encode(cursor: Cursor) -> str:
    at = cursor.created_at.isoformat() if cursor.created_at else None
    fields: list[object] = [cursor.phase, at, cursor.id]
    if cursor.as_of is not None:
        fields.append(cursor.as_of.isoformat())
    raw = json.dumps(fields, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: str) -> Cursor:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        phase, at, row_id, *rest = json.loads(raw)
        created_at = datetime.fromisoformat(at) if at is not None else None
        (snapshot,) = rest or [None]
        as_of = datetime.fromisoformat(snapshot) if snapshot is not None else None
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidCursor(f"invalid cursor {token!r}") from exc
    if phase not in PHASES:
        raise InvalidCursor(f"invalid cursor {token!r}: unknown phase")
    if (created_at is None) != (row_id is None) or (row_id is not None and type(row_id) is not int):
        raise InvalidCursor(f"invalid cursor {token!r}: bad position")
    if any(t is not None and t.tzinfo is None for t in (created_at, as_of)):
        raise InvalidCursor(f"invalid cursor {token!r}: naive time")
    return Cursor(phase, created_at, row_id, as_of)
