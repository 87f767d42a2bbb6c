"""The hardware agents name in their heartbeats (issue #28), on its way to the ledger.

An agent sends its host's identity whole (DMI serial, GPUs) on its first heartbeat and only a
16-hex digest of it after. At 10,000 agents the heartbeat is the controller's hottest path
(#24), so a heartbeat costs this module one dict lookup: `wants_hardware` asks for the whole
identity only when the digest is not the one this replica last took from that node (a new
agent, new hardware, or this replica restarted), and the agent sends it on its next heartbeat.

What arrives is kept in memory and written with the heartbeat book's batched flush
(store/heartbeats.py calls `flush`): one transaction per flush at most, and none when the
ledger's picture already holds it (ledger/store.py writes only a node seen on another machine,
or a GPU on another machine or slot). So a quarantined machine's DMI serial reported under a
new node name is in the ledger within a flush, before any fault, and the leader's arrival check
fences the node (remediation/machine_hold.py).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Mapping
from datetime import datetime

from remediator.clock import Clock
from remediator.ledger.identity import HostHardware
from remediator.ledger.store import Ledger

log = logging.getLogger(__name__)

# Nodes handed to the ledger per flush. A fleet's first wave (10,000 agents, 8 GPUs each) in one
# transaction held ~90,000 ORM rows at once, and the allocator kept that peak as the
# controller's RSS for good (bench scale_10k: 220 → 417 MB); the rest waits for the next flush.
# Since the ledger writes Core rows a few hundred at a time, a flush's own peak is small, and
# what waits is the larger one: identities held whole until flushed (~0.8 KB a node). 1,000 a
# flush drain a first wave as fast as agents arrive (~1,000 a second, one urgent flush a
# second): bench controller_memory, 10,000 agents: 29.0 MB RSS at 500, 25.3 MB at 1,000.
FLUSH_BATCH = 1000


def wants_hardware(known: Mapping[str, str], node: str, digest: str | None) -> bool:
    """Whether the answer asks the agent for its whole identity: it named a digest this replica
    does not hold for the node. An agent that reads no identity sends no digest: nothing to ask."""
    return digest is not None and known.get(node) != digest


class HardwareSightings:
    """Thread-safe: heartbeat handlers call `heard`, the book's flush calls `flush`."""

    def __init__(self, ledger: Ledger, clock: Clock) -> None:
        self._ledger = ledger
        self._clock = clock
        self._known: dict[str, str] = {}  # node → digest of the identity taken from it
        self._pending: dict[str, tuple[HostHardware, datetime]] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.taken = 0  # whole identities received
        self.flushes = 0  # flushes that had something to hand the ledger

    def heard(self, node: str, digest: str | None, hardware: HostHardware | None) -> bool:
        """A heartbeat's identity part. `digest` is the agent's name for the identity, kept as
        given (no digest recomputed on the hot path, nor a controller of another version
        disagreeing with the agent on one). True: ask for the identity whole. Memory only."""
        if hardware is None:
            return wants_hardware(self._known, node, digest)
        with self._lock:
            if digest is not None and self._known.get(node) == digest:
                return False  # sent whole again (asked by another replica): nothing new
            if digest is not None:
                self._known[node] = digest
            self._pending[node] = (hardware, self._clock.now())
            self.taken += 1
        return False

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def flush(self) -> int:
        """Hand what arrived since the last flush to the ledger, `FLUSH_BATCH` nodes at most, in
        one go; returns how many nodes. A failed write keeps them pending (a newer report of a
        node wins) and raises."""
        with self._flush_lock:
            with self._lock:
                nodes = list(itertools.islice(self._pending, FLUSH_BATCH))
                batch = {node: self._pending.pop(node) for node in nodes}
            if not batch:
                return 0
            try:
                conflicts = self._ledger.observe_hosts(batch)
            except Exception:
                with self._lock:
                    for node, seen in batch.items():
                        self._pending.setdefault(node, seen)
                raise
            self.flushes += 1
        for conflict in conflicts:
            log.warning(
                "GPU %s reported at %s on %s, where %s was: a swapped card, kept apart",
                conflict.seen_uuid,
                conflict.pci_bus_id,
                conflict.node,
                conflict.known_uuid,
                extra={"node": conflict.node},
            )
        return len(batch)
