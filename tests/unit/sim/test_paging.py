"""Chunked lists: consistent pages from one snapshot, expired tokens answered 410."""

from __future__ import annotations

import pytest

from remediator.sim.kube.api.paging import Snapshots
from remediator.sim.kube.api.store import BadRequest, Gone


def test_pages_come_from_one_snapshot() -> None:
    snaps = Snapshots()
    items = [{"metadata": {"name": f"n{i}"}} for i in range(5)]
    first = snaps.first_page(items, 7, 2)
    assert [o["metadata"]["name"] for o in first.items] == ["n0", "n1"]
    assert first.remaining == 3
    items.clear()
    second = snaps.next_page(first.continue_token, 2)
    third = snaps.next_page(second.continue_token, 2)
    assert [o["metadata"]["name"] for o in second.items + third.items] == ["n2", "n3", "n4"]
    assert (third.continue_token, third.resource_version) == ("", 7)
    with pytest.raises(Gone):
        snaps.next_page(first.continue_token, 2)


def test_unlimited_and_bad_tokens() -> None:
    snaps = Snapshots(ttl=0.0)
    assert snaps.first_page([{"metadata": {}}], 1, 0).continue_token == ""
    page = snaps.first_page([{"metadata": {}}] * 3, 1, 1)
    with pytest.raises(Gone):
        snaps.next_page(page.continue_token, 1)
    with pytest.raises(BadRequest):
        snaps.next_page("not-a-token", 1)
