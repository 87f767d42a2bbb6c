"""The list's filters from a browser's query string, forgiving of the empty fields a GET form
sends; the JSON API declares the same filters as typed parameters instead (see api)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from remediator.model.states import State
from remediator.signals import bounds
from remediator.signals.model import SignalKind
from remediator.store.records import RemediationFilter

MAX_INT = 2**31 - 1
OUTCOMES = ("repaired", "replaced")
MAX_TEXT = 253
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TEXT_FIELDS = (
    "node",
    "q",
    "pool",
    "signal_kind",
    "xid",
    "policy",
    "from",
    "to",
    "finished_from",
    "outcome",
    "dry_run",
)


@dataclass(frozen=True)
class ParsedFilters:
    """`values` echoes what was asked, to refill the form; `problems` explains what was ignored."""

    filters: RemediationFilter
    values: Mapping[str, str] = field(default_factory=dict)
    states: frozenset[str] = frozenset()
    problems: tuple[str, ...] = ()


def parse_time(raw: str) -> datetime:
    """ISO 8601; without a zone (a datetime-local field) or as a bare date, it means UTC.
    ValueError for anything else, including times that do not exist in UTC."""
    text = raw.strip()
    if len(text) == 10:
        return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    try:
        return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except OverflowError as exc:
        raise ValueError(f"{text} is out of range") from exc


def printable(text: str) -> bool:
    """No control characters: PostgreSQL refuses NUL, and no real name or reason has any."""
    return not _CONTROL.search(text)


def parse_filters(params: Mapping[str, Sequence[str]]) -> ParsedFilters:
    values: dict[str, str] = {}
    problems: list[str] = []
    for key in TEXT_FIELDS:
        raw = params.get(key, [""])[-1].strip()
        if raw and printable(raw) and len(raw) <= MAX_TEXT:
            values[key] = raw
        elif raw:
            problems.append(f"{key}: not a usable value")
    states: set[State] = set()
    for raw in params.get("state", ()):
        if not raw:
            continue
        try:
            states.add(State(raw))
        except ValueError:
            problems.append(f"unknown state {raw!r}")
    if "node" in values and (problem := bounds.node_name_problem(values["node"])):
        values.pop("node")
        problems.append(f"node: {problem}")
    kind = values.get("signal_kind")
    if kind is not None and kind not in {k.value for k in SignalKind}:
        problems.append(f"unknown signal kind {kind!r}")
        kind = None
    xid_code: int | None = None
    if "xid" in values:
        if values["xid"].isdigit() and int(values["xid"]) <= MAX_INT:
            xid_code = int(values["xid"])
        else:
            problems.append(f"XID must be a number, not {values['xid']!r}")
    times: dict[str, datetime] = {}
    for key in ("from", "to", "finished_from"):
        if key in values:
            try:
                times[key] = parse_time(values[key])
            except ValueError:
                problems.append(f"{key}: not a date or time: {values[key]!r}")
    outcome = values.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        problems.append(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        outcome = None
    dry_run = {"yes": True, "no": False}.get(values.get("dry_run", ""))
    filters = RemediationFilter(
        node=values.get("node"),
        node_search=values.get("q"),
        pool=values.get("pool"),
        states=frozenset(states),
        signal_kind=kind,
        xid_code=xid_code,
        policy=values.get("policy"),
        created_from=times.get("from"),
        created_to=times.get("to"),
        dry_run=dry_run,
        in_flight_first=params.get("order", ["in_flight"])[-1] != "newest",
        finished_from=times.get("finished_from"),
        outcome=outcome,
    )
    return ParsedFilters(filters, values, frozenset(s.value for s in states), tuple(problems))
