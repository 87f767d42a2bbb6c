"""Label and field selectors parsed as the API server parses them, so that `?labelSelector=`
and `?fieldSelector=` filter lists and watches as on a real cluster (and reject what it rejects).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remediator.sim.kube.api.store import BadRequest, Obj

_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # = != in notin exists !exists gt lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if not present:
            return False
        try:
            number = int(str(value))
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == "gt" else number < bound


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


_TOKEN = re.compile(r"\s*(!=|==|=|!|\(|\)|,|>|<|[^\s!=(),<>]+)")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise BadRequest(f"unable to parse requirement: {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _check_key(key: str) -> str:
    if not _KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise BadRequest(f"unable to parse requirement: invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise BadRequest(f"unable to parse requirement: invalid label value: {value!r}")
    return value


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the string form (`a=b,c!=d,e in (f,g),!h,i>3`); an empty selector matches all."""
    if not text or not text.strip():
        return LabelSelector()
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def take() -> str:
        nonlocal i
        if i >= len(toks):
            raise BadRequest(f"unable to parse requirement: unexpected end of {text!r}")
        i += 1
        return toks[i - 1]

    while i < len(toks):
        tok = take()
        if tok == "!":
            reqs.append(Requirement(_check_key(take()), "!exists"))
        else:
            key = _check_key(tok)
            nxt = toks[i] if i < len(toks) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
            elif nxt in ("=", "==", "!="):
                take()
                value = take() if i < len(toks) and toks[i] != "," else ""
                reqs.append(Requirement(key, "!=" if nxt == "!=" else "=", (_check_value(value),)))
            elif nxt in (">", "<"):
                take()
                bound = take()
                if not re.fullmatch(r"-?\d+", bound):
                    raise BadRequest(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, the "
                        f"value must be an integer: {bound!r}"
                    )
                reqs.append(Requirement(key, "gt" if nxt == ">" else "lt", (bound,)))
            elif nxt in ("in", "notin"):
                take()
                if take() != "(":
                    raise BadRequest(f"unable to parse requirement: expected '(' in {text!r}")
                values: list[str] = []
                while True:
                    tok = take()
                    if tok == ")":
                        break
                    if tok == ",":
                        continue
                    values.append(_check_value(tok))
                reqs.append(Requirement(key, nxt, tuple(values)))
            else:
                raise BadRequest(f"unable to parse requirement: found {nxt!r} in {text!r}")
        if i < len(toks):
            if toks[i] != ",":
                raise BadRequest(f"unable to parse requirement: expected ',' in {text!r}")
            i += 1
    return LabelSelector(tuple(reqs))


def _path(*keys: str) -> Callable[[Obj], str]:
    def get(obj: Obj) -> str:
        cur: Any = obj
        for key in keys:
            cur = cur.get(key) if isinstance(cur, dict) else None
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)

    return get


_COMMON_FIELDS = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}
# The field labels each resource supports, per the API server's `GetAttrs`/conversion functions.
FIELDS: dict[str, dict[str, Callable[[Obj], str]]] = {
    "pods": {
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": lambda o: "true" if o.get("spec", {}).get("hostNetwork") else "false",
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
    "nodes": {
        "spec.unschedulable": lambda o: (
            "true" if o.get("spec", {}).get("unschedulable") else "false"
        ),
    },
    "events": {
        "involvedObject.kind": _path("involvedObject", "kind"),
        "involvedObject.namespace": _path("involvedObject", "namespace"),
        "involvedObject.name": _path("involvedObject", "name"),
        "involvedObject.uid": _path("involvedObject", "uid"),
        "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
        "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
        "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
    "namespaces": {"status.phase": _path("status", "phase")},
}


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[Callable[[Obj], str], bool, str], ...] = ()  # (getter, equal?, value)

    def matches(self, obj: Obj) -> bool:
        return all((get(obj) == value) == equal for get, equal, value in self.terms)

    def exact_name(self) -> str | None:
        """The name a `metadata.name=X` term pins, which lets a watch skip other objects."""
        for get, equal, value in self.terms:
            if equal and get is _COMMON_FIELDS["metadata.name"]:
                return value
        return None


def parse_field_selector(text: str | None, resource: str) -> FieldSelector:
    """Parse `a=b,c!=d` against the fields `resource` supports (400 for any other field)."""
    if not text or not text.strip():
        return FieldSelector()
    supported = {**_COMMON_FIELDS, **FIELDS.get(resource.rpartition("/")[2], {})}
    terms = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if m is None:
            raise BadRequest(f'invalid selector: {text!r}; can\'t understand "{part}"')
        field, op, value = m.groups()
        getter = supported.get(field)
        if getter is None:
            raise BadRequest(f"field label not supported: {field}")
        terms.append((getter, op != "!=", value))
    return FieldSelector(tuple(terms))
