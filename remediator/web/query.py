"""What the API's query strings mean, beyond what each parameter's type says: a time is RFC 3339
text, and a parameter that takes one value is given once."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Annotated

from fastapi import Request
from fastapi.dependencies.utils import field_annotation_is_sequence, get_flat_params
from fastapi.params import Query
from fastapi.routing import APIRoute

from remediator.signals.wire import TimeText
from remediator.store import cursor as cursors
from remediator.web.problems import WebError

QueryTime = Annotated[datetime, TimeText]
# A cursor is any text of its grammar (`store.cursor`): each is a position a page can start
# from, so a cursor the schema allows is never refused.
ListCursor = Annotated[
    str | None,
    Query(max_length=cursors.MAX_LENGTH, pattern=cursors.LIST_PATTERN, description="`next_cursor`"),
]
PositionCursor = Annotated[
    str | None, Query(max_length=cursors.MAX_LENGTH, pattern=cursors.POSITION_PATTERN)
]

_LISTS = "_remediator_list_parameters"


def _list_parameters(route: APIRoute) -> frozenset[str]:
    """The route's query parameters that take several values (declared as lists), worked out
    once and kept on the route itself (an id-keyed cache would outlive it)."""
    found: frozenset[str] | None = getattr(route, _LISTS, None)
    if found is None:
        found = frozenset(
            field.alias
            for field in get_flat_params(route.dependant)
            if isinstance(field.field_info, Query)
            and field_annotation_is_sequence(field.field_info.annotation)
        )
        setattr(route, _LISTS, found)
    return found


def single_valued_query(request: Request) -> None:
    """Refuse `?q=a&q=b` under /api where `q` takes one value: the framework would silently
    take the last one, so a client's mistake would read as a filter it did not ask for."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.url.path.startswith("/api/"):
        return
    counts = Counter(key for key, _ in request.query_params.multi_items())
    lists = _list_parameters(route)
    repeated = sorted((k, n) for k, n in counts.items() if n > 1 and k not in lists)
    if repeated:
        named = ", ".join(f"{k} given {n} times" for k, n in repeated)
        raise WebError(422, f"query parameter takes one value: {named}")
