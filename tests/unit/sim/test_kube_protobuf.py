"""The protobuf reviews kubectl's typed client POSTs (`kubectl auth can-i`): the spec is read
from the envelope by k8s.io/api/authorization/v1's field numbers; anything else is refused."""

from __future__ import annotations

import pytest

from remediator.sim.kube.api.protobuf import MAGIC, ProtobufError, review_spec


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def envelope(kind: str, obj: bytes) -> bytes:
    type_meta = field(1, b"authorization.k8s.io/v1") + field(2, kind.encode())
    # runtime.Unknown: typeMeta, raw, contentEncoding (empty), contentType (empty)
    return MAGIC + field(1, type_meta) + field(2, obj) + field(3, b"") + field(4, b"")


def test_an_access_review_spec_from_protobuf() -> None:
    attributes = (
        field(1, b"remediator")
        + field(2, b"create")
        + field(5, b"pods")
        + field(6, b"eviction")
        + field(7, b"p-1")
    )
    metadata = field(1, b"")  # ObjectMeta, skipped
    status = varint(3 << 3 | 2) + varint(2) + varint(1 << 3 | 0) + varint(1)  # allowed: true
    body = envelope("SelfSubjectAccessReview", metadata + field(2, field(1, attributes)) + status)
    assert review_spec(body, "SelfSubjectAccessReview") == {
        "resourceAttributes": {
            "namespace": "remediator",
            "verb": "create",
            "resource": "pods",
            "subresource": "eviction",
            "name": "p-1",
        }
    }
    path = envelope(
        "SelfSubjectAccessReview", field(2, field(2, field(1, b"/version") + field(2, b"get")))
    )
    assert review_spec(path, "SelfSubjectAccessReview") == {
        "nonResourceAttributes": {"path": "/version", "verb": "get"}
    }


def test_a_rules_review_spec_and_refusals() -> None:
    rules = envelope("SelfSubjectRulesReview", field(2, field(1, b"remediator")))
    assert review_spec(rules, "SelfSubjectRulesReview") == {"namespace": "remediator"}
    with pytest.raises(ProtobufError):
        review_spec(rules, "SelfSubjectAccessReview")
    with pytest.raises(ProtobufError):
        review_spec(b'{"spec": {}}', "SelfSubjectRulesReview")
    with pytest.raises(ProtobufError):
        review_spec(rules[:-3], "SelfSubjectRulesReview")
