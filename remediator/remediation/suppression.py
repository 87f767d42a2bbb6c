"""A human's cancel sticks: after on-call cancels a remediation, no policy opens another one on
that node for the same fault until the cooldown the human chose has passed. Pure.

"The same fault" is judged by the GPU: a `gpu-missing` echo of a cancelled XID 79 on GPU 0 names
GPU 0 too, and a node-wide signal (a node condition) cannot be told apart from the cancelled
fault at all. A signal on a GPU the cancelled remediation did not name is a new, distinct fault
and is decided as usual. A cancelled remediation with a node-wide signal covers every GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from remediator.signals.model import Signal
from remediator.store.records import RemediationRecord

DEFAULT_CANCEL_COOLDOWN = timedelta(hours=1)


def covers(cancelled: RemediationRecord, signal: Signal) -> bool:
    """Whether `signal` may be the fault `cancelled` was about."""
    gpus = {s.gpu for s in cancelled.signals}
    return not gpus or None in gpus or signal.gpu is None or signal.gpu in gpus


def suppressed_by(
    node: str, signals: Iterable[Signal], cancels: Sequence[RemediationRecord], now: datetime
) -> RemediationRecord | None:
    """The human cancel that keeps this decision from opening, if any: every one of its signals
    must be covered by a cancel of the node still in force."""
    active = [
        c for c in cancels if c.node == node and c.suppressed_until and c.suppressed_until > now
    ]
    if not active:
        return None
    listed = list(signals)
    for cancel in active:
        if all(covers(cancel, s) for s in listed):
            return cancel
    return None
