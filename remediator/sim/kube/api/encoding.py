"""JSON text of stored objects, kept per resourceVersion. Encoding dominates a large list (7,000
pods are 20 MB of JSON), and a stored object never changes in place — a write replaces it with a
new resourceVersion — so each version is encoded once and lists are assembled from the pieces.
"""

from __future__ import annotations

import json
from typing import Any

from remediator.sim.kube.api.store import Key, Obj


def dumps(body: Any) -> str:
    return json.dumps(body, separators=(",", ":"))


class EncodedObjects:
    """Used from the server's event loop only, so it needs no lock."""

    def __init__(self) -> None:
        self._texts: dict[str, dict[Key, tuple[str, str]]] = {}

    def encode(self, resource: str, obj: Obj) -> str:
        meta = obj.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        rv = meta.get("resourceVersion", "")
        texts = self._texts.setdefault(resource, {})
        cached = texts.get(key)
        if cached is not None and cached[0] == rv:
            return cached[1]
        text = dumps(obj)
        texts[key] = (rv, text)
        return text

    def list_body(self, resource: str, head: Obj, items: list[Obj]) -> str:
        """`head` (kind, apiVersion, metadata) followed by `"items": [...]`."""
        opening = dumps(head)[:-1]
        joined = ",".join(self.encode(resource, o) for o in items)
        return f'{opening},"items":[{joined}]}}'

    def forget_all_but(self, resource: str, live: list[Obj]) -> None:
        """Drop the texts of objects that no longer exist (called with a full, unfiltered list)."""
        keep = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in live}
        texts = self._texts.get(resource, {})
        for key in [k for k in texts if k not in keep]:
            del texts[key]
