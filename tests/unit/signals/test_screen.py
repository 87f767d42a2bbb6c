"""Signals for nodes the cluster does not have, or GPUs it does not have, never reach evaluation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from remediator.kube.objects import Node
from remediator.signals.model import Signal, SignalKind
from remediator.signals.screen import DropReason, RecentDrops, screen, summary

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def xid(node: str, gpu: int | None = 0) -> Signal:
    return Signal(node=node, kind=SignalKind.XID, source="t", observed_at=NOW, gpu=gpu, code=79)


def test_unknown_nodes_are_dropped_with_a_reason() -> None:
    screened = screen([xid("old-host-1"), xid("gpu-a"), xid("old-host-2", gpu=None)], {"gpu-a": 8})
    assert [s.node for s in screened.kept] == ["gpu-a"]
    assert screened.counts() == {DropReason.UNKNOWN_NODE: 2}
    assert screened.dropped[0].detail == "old-host-1: no such node in the cluster"


def test_a_gpu_index_beyond_the_nodes_gpus_is_dropped() -> None:
    """Problem 6: GPU index 8 on an 8-GPU node was accepted."""
    screened = screen(
        [xid("gpu-a", gpu=8), xid("gpu-a", gpu=7), xid("gpu-b", gpu=8)],
        {
            "gpu-a": 8,
            "gpu-b": None,  # capacity unknown: only the general bound applies
        },
    )
    assert [(s.node, s.gpu) for s in screened.kept] == [("gpu-a", 7), ("gpu-b", 8)]
    (dropped,) = screened.dropped
    assert dropped.reason is DropReason.GPU_OUT_OF_RANGE
    assert dropped.detail == "gpu-a: GPU index 8 but the node has 8 GPU(s) (0..7)"


def test_the_summary_names_counts_and_a_few_examples() -> None:
    screened = screen([xid(f"old-{i}") for i in range(7)], {})
    text = summary(screened.dropped, examples=2)
    assert text.startswith("{'unknown_node': 7}: old-0: no such node")
    assert text.endswith("(and 5 more)")


def test_a_node_reads_its_gpu_count_from_its_capacity() -> None:
    raw = {"metadata": {"name": "gpu-a"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    assert Node.from_json(raw).gpus == 8
    assert Node.from_json({"metadata": {"name": "cpu-a"}}).gpus is None
    odd = {"metadata": {"name": "gpu-a"}, "status": {"capacity": {"nvidia.com/gpu": "1k"}}}
    assert Node.from_json(odd).gpus is None


def test_a_repeated_drop_is_news_once_per_window() -> None:
    """A held alert for an unknown node is re-announced at every poll: counted once a window."""
    recent = RecentDrops(window=timedelta(minutes=5))
    first = screen([xid("old-host-1"), xid("old-host-2")], {}).dropped
    assert len(recent.news(first, NOW)) == 2
    again = screen([xid("old-host-1"), xid("old-host-1", gpu=1)], {}).dropped
    assert [d.signal.gpu for d in recent.news(again, NOW + timedelta(seconds=15))] == [1]
    assert len(recent.news(first, NOW + timedelta(minutes=5, seconds=1))) == 2
