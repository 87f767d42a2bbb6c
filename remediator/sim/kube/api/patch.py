"""The three PATCH flavours the API server accepts: JSON patch (RFC 6902), JSON merge patch
(RFC 7386) and strategic merge patch, the last with the real merge keys of the types remediator
and kubectl touch (`patchStrategy:"merge" patchMergeKey:"…"` tags in k8s.io/api). Lists without a
strategy — node taints, pod tolerations — are replaced whole, as on a real cluster.
"""

from __future__ import annotations

import copy
from typing import Any

from remediator.sim.kube.api.store import BadRequest, Invalid, Obj, UnsupportedMediaType

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

# Path of a list (keys from the object root, "*" for any list element) -> its merge key;
# None marks a merged list of primitives (set semantics).
_POD_SPEC: dict[tuple[str, ...], str | None] = {
    ("containers",): "name",
    ("initContainers",): "name",
    ("ephemeralContainers",): "name",
    ("containers", "*", "env"): "name",
    ("initContainers", "*", "env"): "name",
    ("containers", "*", "ports"): "containerPort",
    ("initContainers", "*", "ports"): "containerPort",
    ("containers", "*", "volumeMounts"): "mountPath",
    ("initContainers", "*", "volumeMounts"): "mountPath",
    ("containers", "*", "volumeDevices"): "devicePath",
    ("volumes",): "name",
    ("imagePullSecrets",): "name",
    ("hostAliases",): "ip",
}
_META: dict[tuple[str, ...], str | None] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): None,
}
_CONDITIONS: dict[tuple[str, ...], str | None] = {("status", "conditions"): "type"}


def _with_prefix(
    prefix: tuple[str, ...], table: dict[tuple[str, ...], str | None]
) -> dict[tuple[str, ...], str | None]:
    return {prefix + k: v for k, v in table.items()}


_TEMPLATE = _with_prefix(("spec", "template", "spec"), _POD_SPEC)
MERGE_KEYS: dict[str, dict[tuple[str, ...], str | None]] = {
    "nodes": {
        **_META,
        **_CONDITIONS,
        ("status", "addresses"): "type",
        ("spec", "podCIDRs"): None,
    },
    "pods": {**_META, **_CONDITIONS, **_with_prefix(("spec",), _POD_SPEC)},
    "apps/daemonsets": {**_META, **_CONDITIONS, **_TEMPLATE},
    "apps/replicasets": {**_META, **_CONDITIONS, **_TEMPLATE},
    "apps/deployments": {**_META, **_CONDITIONS, **_TEMPLATE},
    "batch/jobs": {**_META, **_CONDITIONS, **_TEMPLATE},
    "policy/poddisruptionbudgets": {**_META, **_CONDITIONS},
}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# -- JSON patch ----------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise Invalid(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise Invalid(f"invalid array index {token!r}")
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not for_add):
        raise Invalid(f"array index {idx} out of bounds")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for tok in tokens[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise Invalid(f"path component {tok!r} does not exist")
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_index(cur, tok, for_add=False)]
        else:
            raise Invalid(f"cannot descend into a scalar at {tok!r}")
    return cur


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(f"path {path!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise Invalid(f"path {path!r} does not exist")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], for_add=True), value)
    else:
        raise Invalid(f"cannot add at {path!r}")
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise Invalid("cannot remove the whole document")
    parent = _parent(doc, tokens)
    if isinstance(parent, dict):
        if tokens[-1] not in parent:
            raise Invalid(f"unable to remove nonexistent key {tokens[-1]!r}")
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], for_add=False)]
    else:
        raise Invalid(f"cannot remove at {path!r}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902, all six operations; any failing operation (a failed `test` included) fails the
    whole patch and leaves `doc` untouched."""
    if not isinstance(ops, list):
        raise BadRequest("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise BadRequest(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise BadRequest(f"json patch {kind} operation needs a value")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = (
                _add(_remove(doc, path), path, copy.deepcopy(op["value"])) if path else op["value"]
            )
        elif kind == "move":
            value = _get(doc, op["from"])
            doc = _add(_remove(doc, op["from"]), path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise Invalid(f"testing value {path} failed")
        else:
            raise BadRequest(f"unexpected json patch operation {kind!r}")
    return doc


# -- strategic merge patch -----------------------------------------------------------------------

_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def strategic_merge_patch(resource: str, target: Obj, patch: Any) -> Obj:
    """Apply a strategic merge patch to an object of `resource`."""
    if not isinstance(patch, dict):
        raise BadRequest("strategic merge patch must be a JSON object")
    result = _merge_map(target, patch, (), MERGE_KEYS.get(resource, _META))
    if not isinstance(result, dict):
        raise Invalid("patch removed the whole object")
    return result


def _merge_map(
    target: Any, patch: dict[str, Any], path: tuple[str, ...], keys: dict[tuple[str, ...], Any]
) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise BadRequest(f"unknown patch type: {directive!r} in map")
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$retainKeys",) or key.startswith(_ORDER):
            continue
        if key.startswith(_DELETE_PRIMITIVES):
            field = key[len(_DELETE_PRIMITIVES) :]
            doomed = set(map(repr, value or []))
            result[field] = [v for v in result.get(field) or [] if repr(v) not in doomed]
            continue
        child = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _merge_map(result.get(key), value, child, keys)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, child, keys)
        else:
            result[key] = value
    for key, value in patch.items():
        if key.startswith(_ORDER):
            field = key[len(_ORDER) :]
            result[field] = _order(
                result.get(field) or [], value, keys.get(_generic((*path, field)))
            )
    if retain is not None:
        result = {k: v for k, v in result.items() if k in set(retain)}
    return result


def _generic(path: tuple[str, ...]) -> tuple[str, ...]:
    """Strip list indices from a path: merge keys are declared per field, not per element."""
    return tuple("*" if p.isdigit() else p for p in path)


def _merge_list(
    target: Any, patch: list[Any], path: tuple[str, ...], keys: dict[tuple[str, ...], Any]
) -> list[Any]:
    generic = _generic(path)
    if generic not in keys:
        return [v for v in copy.deepcopy(patch) if not _is_directive(v)]
    merge_key = keys[generic]
    current = list(target) if isinstance(target, list) else []
    if merge_key is None:
        if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
            return [v for v in patch if not _is_directive(v)]
        return current + [v for v in patch if v not in current]
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not _is_directive(v)]
    result = list(current)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise BadRequest(f"map: {item!r} does not contain declared merge key: {merge_key}")
        idx = next(
            (
                i
                for i, cur in enumerate(result)
                if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                del result[idx]
            continue
        elem_path = (*path, str(idx if idx is not None else len(result)))
        merged = _merge_map(result[idx] if idx is not None else {}, item, elem_path, keys)
        if idx is None:
            result.append(merged)
        else:
            result[idx] = merged
    return result


def _is_directive(value: Any) -> bool:
    return isinstance(value, dict) and "$patch" in value and len(value) == 1


def _order(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    """`$setElementOrder`: the listed elements first, in the given order, then any others."""

    def ident(item: Any) -> Any:
        return item.get(merge_key) if merge_key and isinstance(item, dict) else item

    wanted = [ident(o) for o in order]
    rank = {repr(w): i for i, w in enumerate(wanted)}
    return sorted(items, key=lambda it: rank.get(repr(ident(it)), len(rank)))


def apply_patch(resource: str, content_type: str, target: Obj, patch: Any) -> Obj:
    """Dispatch on the request's Content-Type (parameters such as charset ignored)."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        result = json_patch(target, patch)
    elif kind == MERGE_PATCH:
        result = merge_patch(target, patch)
    elif kind == STRATEGIC_MERGE_PATCH:
        result = strategic_merge_patch(resource, target, patch)
    else:
        raise UnsupportedMediaType(
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}"
        )
    if not isinstance(result, dict):
        raise Invalid("the patched object is not a JSON object")
    return result
