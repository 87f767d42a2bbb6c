"""#39 item 9: the signals the store keeps no row of (one per key per fold window) are counted
onto the row it keeps, with their own dispositions when they differ, and the count is never cut
off by the column's length."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from remediator.signals.model import Signal, SignalKind
from remediator.signals.repeats import MAX_TEXT, StoredRows

T0 = datetime(2026, 4, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=5)
FOLDED = ("folded", "folded: the same XID 79 on GPU 0 was taken in at …")


def xid(seconds: int, gpu: int = 0) -> Signal:
    at = T0 + timedelta(seconds=seconds)
    return Signal(
        node="gpu-a1", kind=SignalKind.XID, source="push", observed_at=at, gpu=gpu, code=79
    )


def test_repeats_in_the_batch_of_the_row_are_in_the_text_it_is_written_with() -> None:
    rows = StoredRows(WINDOW)
    first, second, third = xid(10), xid(20), xid(15)
    assert rows.take(first, FOLDED, T0)
    assert not rows.take(second, FOLDED, T0) and not rows.take(third, FOLDED, T0)
    until = (T0 + timedelta(seconds=20)).isoformat()
    assert rows.text_of(first) == f"{FOLDED[1]}; and 2 more until {until}"
    assert rows.changed() == [], "written with the row: nothing to rewrite"
    assert rows.take(xid(10, gpu=1), FOLDED, T0), "another GPU is another row"


def test_later_repeats_rewrite_the_row_with_their_classes_until_the_window_ends() -> None:
    rows = StoredRows(WINDOW)
    first = xid(0)
    assert rows.take(first, FOLDED, T0) and rows.text_of(first) == FOLDED[1]
    later = T0 + timedelta(minutes=1)
    assert not rows.take(xid(60), FOLDED, later)
    assert not rows.take(xid(61), ("joined", "joined #4"), later)
    until = (T0 + timedelta(seconds=61)).isoformat()
    assert rows.changed() == [
        (first, f"{FOLDED[1]}; and 2 more (1 folded, 1 joined) until {until}")
    ]
    assert rows.changed() == []
    over = T0 + WINDOW + timedelta(seconds=1)
    rows.expire(over)
    assert len(rows) == 0 and rows.take(xid(400), FOLDED, over), "a new window, a new row"


def test_the_count_survives_the_columns_length_and_a_row_without_a_disposition() -> None:
    rows = StoredRows(WINDOW)
    long, bare = xid(0), xid(0, gpu=2)
    assert rows.take(long, ("folded", "x" * 600), T0) and rows.take(bare, ("", None), T0)
    assert not rows.take(xid(1), FOLDED, T0) and not rows.take(xid(1, gpu=2), ("", None), T0)
    text = rows.text_of(long)
    assert text is not None and len(text) == MAX_TEXT
    assert text.endswith(f"; and 1 more until {(T0 + timedelta(seconds=1)).isoformat()}")
    assert rows.text_of(bare) == f"and 1 more until {(T0 + timedelta(seconds=1)).isoformat()}"
