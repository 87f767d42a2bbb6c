"""Which of the nodes a push names the cluster has, and their GPU counts, for the push path's
screen at the door (signals/sources/push.py): the node cache first, and for a name the cache
lacks a read of the node itself, so a node that joined a moment ago is not refused as unknown
(the same care the leader's intake takes before it drops a signal)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from remediator.errors import RemediatorError
from remediator.kube.objects import Node

# Reads of the API server one request may cost: a sender naming many unknown nodes (a shared
# Alertmanager, an old inventory) is judged by the cache past these.
MAX_FRESH_READS = 8


def node_gpus(
    cached: Callable[[Sequence[str]], dict[str, int | None] | None],
    read_node: Callable[[str], Node | None],
    names: Sequence[str],
) -> Mapping[str, int | None] | None:
    """`names` the cluster has → GPU count (None: not said); None when nobody can say yet
    (the cache not synced, the API server not answering)."""
    found = cached(names)
    if found is None:
        return None
    missing = [n for n in dict.fromkeys(names) if n not in found]
    for name in missing[:MAX_FRESH_READS]:
        try:
            node = read_node(name)
        except RemediatorError:
            return None
        if node is not None:
            found[name] = node.gpus
    return found
