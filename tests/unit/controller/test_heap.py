"""Scheduled full collections: frozen objects are skipped by ordinary collections and freed
by the next full pass."""

from __future__ import annotations

import gc
import platform
import threading
import weakref
from collections.abc import Iterator

import pytest

from remediator.controller.heap import ScheduledCollections, full_pass, limit_malloc_arenas


class Peer:
    other: Peer


@pytest.fixture
def thawed_after() -> Iterator[None]:
    """The test process must not keep a frozen heap for the tests after it."""
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("thawed_after")
def test_a_cycle_frozen_while_alive_is_freed_by_the_next_full_pass() -> None:
    a, b = Peer(), Peer()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    full_pass()
    assert gc.get_freeze_count() > 0
    del a, b
    gc.collect()  # what allocations set off: frozen objects are not walked
    assert gone() is not None
    full_pass()
    assert gone() is None


@pytest.mark.usefixtures("thawed_after")
def test_passes_run_on_their_thread_until_stopped() -> None:
    stop = threading.Event()
    passes = ScheduledCollections(stop, first=0.0, period=3600.0)
    passes.start()
    assert passes.passed.wait(30)
    assert gc.get_freeze_count() > 0
    stop.set()
    passes.join(30)
    assert not passes._thread.is_alive()


def test_no_pass_when_stopped_before_the_first() -> None:
    stop = threading.Event()
    stop.set()
    passes = ScheduledCollections(stop, first=0.0)
    passes.start()
    passes.join(30)
    assert not passes.passed.is_set()


def test_the_arenas_are_limited_where_the_c_library_is_glibc() -> None:
    assert limit_malloc_arenas() is (platform.libc_ver()[0] == "glibc")
