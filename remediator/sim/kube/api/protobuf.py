"""The few protobuf request bodies the simulated API server reads: kubectl's typed clients
(`kubectl auth can-i`) POST SelfSubjectAccessReview and SelfSubjectRulesReview as
`application/vnd.kubernetes.protobuf` (and take JSON back, which their Accept header allows).

A Kubernetes protobuf body is the magic `k8s\\x00` and a runtime.Unknown (typeMeta = 1 with
apiVersion = 1 and kind = 2, raw = 2: the object's own message). Field numbers are those of
k8s.io/api/authorization/v1; only the spec is read (metadata and status are the server's).
Other request bodies stay JSON or YAML only (server.py answers 415).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

# field number → a string field's JSON name, or (a message field's JSON name, its schema)
Schema = dict[int, "str | tuple[str, Schema]"]
_RESOURCE_ATTRIBUTES: Schema = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: "path", 2: "verb"}
SPECS: dict[str, Schema] = {
    "SelfSubjectAccessReview": {
        1: ("resourceAttributes", _RESOURCE_ATTRIBUTES),
        2: ("nonResourceAttributes", _NON_RESOURCE_ATTRIBUTES),
    },
    "SelfSubjectRulesReview": {1: "namespace"},
}
_TYPE_META: Schema = {1: "apiVersion", 2: "kind"}
_SPEC_FIELD = 2  # of each review: metadata = 1, spec = 2, status = 3


class ProtobufError(ValueError):
    """Not a protobuf body of the expected kind."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, bytes) of each length-delimited field; other wire types are skipped."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError("truncated field")
            yield number, data[pos : pos + size]
            pos += size
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def _decode(data: bytes, schema: Schema) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for number, value in _fields(data):
        entry = schema.get(number)
        if isinstance(entry, str):
            found[entry] = value.decode()
        elif entry is not None:
            found[entry[0]] = _decode(value, entry[1])
    return found


def review_spec(body: bytes, kind: str) -> dict[str, Any]:
    """The JSON form of the spec of a protobuf-encoded `kind` (one of SPECS)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("no Kubernetes protobuf envelope")
    unknown = dict(_fields(body[len(MAGIC) :]))
    type_meta = _decode(unknown.get(1, b""), _TYPE_META)
    if type_meta.get("kind") != kind:
        raise ProtobufError(f"the body is a {type_meta.get('kind')!r}, not a {kind}")
    spec = dict(_fields(unknown.get(2, b""))).get(_SPEC_FIELD, b"")
    return _decode(spec, SPECS[kind])
