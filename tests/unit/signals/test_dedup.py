from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from remediator.signals.dedup import (
    COUNTER_WINDOW,
    DEFAULT_KIND_WINDOWS,
    READING_KINDS,
    SignalFolder,
    fold,
)
from remediator.signals.model import Signal, SignalKind

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = timedelta(minutes=10)


def sig(
    kind: SignalKind = SignalKind.XID,
    *,
    node: str = "gpu-node-1",
    gpu: int | None = 3,
    code: int | None = 79,
    at: float = 0.0,
    value: float | None = None,
) -> Signal:
    return Signal(
        node=node,
        kind=kind,
        source="test",
        observed_at=T0 + timedelta(seconds=at),
        gpu=gpu,
        code=code,
        value=value,
    )


def test_repeated_xid_within_window_is_one() -> None:
    out, state = fold([sig(at=0), sig(at=15), sig(at=30), sig(at=599)], WINDOW)
    assert out == (sig(at=0),)
    assert state == {sig().dedup_key: T0}


def test_repeat_after_window_passes_again() -> None:
    out, _ = fold([sig(at=0), sig(at=300), sig(at=600), sig(at=700)], WINDOW)
    assert [s.observed_at for s in out] == [T0, T0 + timedelta(seconds=600)]


@pytest.mark.parametrize(
    "other",
    [
        sig(node="gpu-node-2"),
        sig(gpu=4),
        sig(code=48),
        sig(SignalKind.NVLINK, code=None, value=12),
        sig(gpu=None),
    ],
)
def test_different_keys_are_not_folded(other: Signal) -> None:
    out, _ = fold([sig(), other], WINDOW)
    assert len(out) == 2


@pytest.mark.parametrize("kind", sorted(READING_KINDS))
def test_readings_are_never_folded(kind: SignalKind) -> None:
    readings = [sig(kind, code=None, value=80.0 + i, at=15 * i) for i in range(20)]
    out, state = fold(readings, WINDOW)
    assert out == tuple(readings)
    assert state == {}


def test_earlier_emission_suppresses_and_order_is_by_time() -> None:
    out, _ = fold([sig(at=30), sig(at=10)], WINDOW, {sig().dedup_key: T0})
    assert out == ()
    out, _ = fold([sig(SignalKind.THERMAL, code=None, at=30), sig(at=700)], WINDOW)
    assert [s.kind for s in out] == [SignalKind.THERMAL, SignalKind.XID]


def test_pure_fold_does_not_mutate_its_input_state() -> None:
    state = {sig().dedup_key: T0}
    fold([sig(at=900)], WINDOW, state)
    assert state == {sig().dedup_key: T0}


def test_folder_remembers_across_cycles() -> None:
    folder = SignalFolder(WINDOW)
    assert folder.fold([sig(at=0)], T0) == (sig(at=0),)
    assert folder.fold([sig(at=15)], T0 + timedelta(seconds=15)) == ()
    assert folder.fold([sig(at=30), sig(gpu=5, at=30)], T0 + timedelta(seconds=30)) == (
        sig(gpu=5, at=30),
    )
    later = T0 + timedelta(seconds=601)
    assert folder.fold([sig(at=601)], later) == (sig(at=601),)


def test_folder_memory_is_bounded_by_window_and_cap() -> None:
    folder = SignalFolder(WINDOW, max_keys=50)
    folder.fold([sig(node=f"n{i}") for i in range(200)], T0)
    assert len(folder) == 50
    folder.fold([sig(node="late", at=601)], T0 + timedelta(seconds=601))
    assert len(folder) == 1  # everything older than the window expired


def test_folder_forgets_oldest_first_so_faults_are_never_hidden() -> None:
    folder = SignalFolder(WINDOW, max_keys=2)
    folder.fold([sig(node="a", at=0), sig(node="b", at=1), sig(node="c", at=2)], T0)
    # "a" was evicted: it may pass again (a duplicate at worst), "c" is still folded.
    now = T0 + timedelta(seconds=3)
    assert [s.node for s in folder.fold([sig(node="a", at=3), sig(node="c", at=3)], now)] == ["a"]


def test_folder_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        SignalFolder(timedelta(0))
    with pytest.raises(ValueError):
        SignalFolder(WINDOW, max_keys=0)


def test_per_kind_windows_fold_counters_for_their_query_window() -> None:
    nvlink = [sig(SignalKind.NVLINK, code=None, value=5, at=t) for t in (0, 60, 120, 180, 240)]
    xids = [sig(at=t) for t in (0, 120, 240)]
    out, _ = fold([*nvlink, *xids], WINDOW, windows={SignalKind.NVLINK: timedelta(minutes=2)})
    assert [(s.kind, s.observed_at.minute) for s in out] == [
        (SignalKind.NVLINK, 0),
        (SignalKind.XID, 0),
        (SignalKind.NVLINK, 2),
        (SignalKind.NVLINK, 4),
    ]


def test_folder_defaults_fold_nvlink_for_the_counter_window() -> None:
    folder = SignalFolder(WINDOW)
    assert folder.windows == DEFAULT_KIND_WINDOWS
    first = sig(SignalKind.NVLINK, code=None, value=5, at=0)
    assert folder.fold([first], T0) == (first,)
    late = sig(SignalKind.NVLINK, code=None, value=5, at=COUNTER_WINDOW.total_seconds())
    assert folder.fold([late], late.observed_at) == (late,)
    again = sig(at=COUNTER_WINDOW.total_seconds())
    assert folder.fold([sig(at=0)], T0) == (sig(at=0),)
    assert folder.fold([again], again.observed_at) == ()  # XIDs keep the general window


OLD_GPU = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
NEW_GPU = "GPU-bbbbbbbb-0000-4000-8000-000000000002"


def test_a_new_gpu_in_the_same_slot_is_not_folded_into_the_old_ones_fault() -> None:
    """A recreated instance under the same name: the new board's GPU 3 fails minutes after the
    old board's did. Another GPU (its UUID), so another fault, though node, index and code
    are the same; the same GPU again, by UUID, is one fault whatever index a source gives."""
    old = sig(at=0).model_copy(update={"gpu_uuid": OLD_GPU})
    new = sig(at=120).model_copy(update={"gpu_uuid": NEW_GPU})
    again = sig(gpu=None, at=180).model_copy(update={"gpu_uuid": NEW_GPU})
    out, state = fold([old, new, again], WINDOW)
    assert out == (old, new)
    assert set(state) == {
        ("gpu-node-1", OLD_GPU, SignalKind.XID, 79),
        ("gpu-node-1", NEW_GPU, SignalKind.XID, 79),
    }
    folder = SignalFolder(WINDOW)
    assert folder.fold([old], T0) == (old,)
    assert folder.fold([new], T0 + timedelta(seconds=120)) == (new,)
    assert folder.fold([again], T0 + timedelta(seconds=180)) == ()
    taken = folder.last_taken(again)
    assert taken == (T0 + timedelta(seconds=120), WINDOW)
    # Without a UUID the index is the GPU, as before.
    out, _ = fold([sig(at=0), sig(at=60)], WINDOW)
    assert out == (sig(at=0),)
