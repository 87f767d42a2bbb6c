"""Encoded-object cache: lists assembled from cached pieces are the JSON of the whole list."""

from __future__ import annotations

import json

from remediator.sim.kube.api.encoding import EncodedObjects
from remediator.sim.kube.api.store import ObjectStore


def test_list_body_is_the_json_of_the_list_and_tracks_versions() -> None:
    store = ObjectStore()
    for name in ("a", "b"):
        store.create("nodes", {"metadata": {"name": name, "labels": {"x": "1"}}})
    cache = EncodedObjects()
    items, rv = store.list("nodes")
    head = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)}}
    assert json.loads(cache.list_body("nodes", head, items)) == {**head, "items": items}
    store.mutate("nodes", "", "a", lambda o: {**o, "metadata": {**o["metadata"], "labels": {}}})
    items, _ = store.list("nodes")
    assert json.loads(cache.list_body("nodes", head, items))["items"] == items
    store.delete("nodes", "", "b")
    items, _ = store.list("nodes")
    cache.forget_all_but("nodes", items)
    assert cache.encode("nodes", items[0]) == json.dumps(items[0], separators=(",", ":"))
