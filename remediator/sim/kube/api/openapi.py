"""The OpenAPI v3 documents kubectl consults before `create -f` / `apply -f`: it validates on
the server (`fieldValidation=Strict`) only when the group-version's document lists that query
parameter on the kind's PATCH operation, and refuses to go on if it cannot tell. The documents
describe operations only, not schemas, so kubectl computes apply patches from its built-in types.
"""

from __future__ import annotations

import hashlib
import json

from remediator.sim.kube.api.discovery import KUBE_VERSION, RESOURCES, Resource
from remediator.sim.kube.api.store import Obj

_QUERY_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "force")


def gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _item_path(r: Resource) -> str:
    scope = "/namespaces/{namespace}" if r.namespaced else ""
    return f"/{gv_path(r.group, r.version)}{scope}/{r.plural}/{{name}}"


def group_version_document(group: str, version: str) -> Obj | None:
    members = [r for r in RESOURCES if r.group_version == (group, version)]
    if not members:
        return None
    paths: Obj = {}
    for r in members:
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        paths[_item_path(r)] = {
            "patch": {
                "operationId": f"patch{r.kind}",
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                    for name in _QUERY_PARAMS
                ],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
        "paths": paths,
    }


def _hash(document: Obj) -> str:
    return hashlib.sha512(json.dumps(document, sort_keys=True).encode()).hexdigest()[:64].upper()


def root_document() -> Obj:
    """`/openapi/v3`: where each group-version's document is, with a content hash."""
    paths: Obj = {}
    for group, version in dict.fromkeys(r.group_version for r in RESOURCES):
        document = group_version_document(group, version)
        if document is not None:
            path = gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(document)}"}
    return {"paths": paths}
