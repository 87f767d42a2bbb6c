"""The controller process's heap: the garbage collector's full passes on a schedule, and glibc's
allocator held to what the process uses.

At 10,000 nodes the controller holds ~400,000 objects the collector tracks (the informer's
nodes, the heartbeat book, the ledger's picture). A full collection walks every one of them with
the GIL held: 130-160 ms here, and a storm's allocations set one off every 2-4 s, so a pushed
XID's cordon waited 217 ms behind one and the console's overview paid ~150 ms for others (bench
scale_10k). Whatever survives a full pass is frozen (`gc.freeze`): the collections allocations
start skip it and walk only what came since. Every `period` seconds the frozen objects are thawed
for one full pass, so a reference cycle among them is freed within a period rather than kept for
the life of the process; then glibc returns the pages the pass freed to the system.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import threading
import time

log = logging.getLogger(__name__)

FIRST_PASS_SECONDS = 30.0  # after start-up has loaded the fleet (informer, heartbeat book)
FULL_PASS_SECONDS = 300.0  # one ~150 ms pause in 5 minutes at 10,000 nodes: ~0.05 % of a core
# glibc gives each thread that allocates its own arena (up to 8 a core), and each keeps the
# memory its thread freed; the controller's ~15 threads (web, informer, jobs, executors) each
# touch large buffers (watch events, query results). Two arenas, as MALLOC_ARENA_MAX=2 would.
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_malloc_arenas() -> bool:
    """Before the controller's threads start; False where the C library is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS))


def full_pass() -> float:
    """One full collection over every object, frozen or not; what survives is frozen again, and
    the freed pages go back to the system (glibc keeps them otherwise: an idle controller at
    2,000 nodes held ~8 MB of them). Returns its seconds."""
    began = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
    return time.perf_counter() - began


class ScheduledCollections:
    """Full passes on a daemon thread until `stop` is set; the first once start-up is over."""

    def __init__(
        self,
        stop: threading.Event,
        first: float = FIRST_PASS_SECONDS,
        period: float = FULL_PASS_SECONDS,
    ) -> None:
        self._stop = stop
        self._first = first
        self._period = period
        self._thread = threading.Thread(target=self._run, name="gc-passes", daemon=True)
        self.passed = threading.Event()  # set at each pass's end

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        wait = self._first
        while not self._stop.wait(wait):
            took = full_pass()
            log.debug(
                "full collection: %.0f ms, %d objects frozen", took * 1000, gc.get_freeze_count()
            )
            self.passed.set()
            wait = self._period
