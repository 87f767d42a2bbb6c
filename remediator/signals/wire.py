"""What a value in a JSON body is, as the published schema reads it: pydantic's lax mode would
take `true` as 1, "5" as 5 and a number as Unix seconds, where the schema says a number and
date-time text. Strict mode would refuse 5.0, which JSON Schema counts an integer."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import AwareDatetime, BeforeValidator

_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def a_number(value: object) -> object:
    """JSON's booleans and strings are not numbers."""
    if isinstance(value, bool | str):
        raise ValueError(f"{value!r} is not a number")
    return value


def not_a_number(value: object) -> object:
    """A time is RFC 3339 text, not a number nor a number's text."""
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError(f"{value!r} is a number: a time is RFC 3339 text (2026-01-10T08:00:00Z)")
    return value


Number = BeforeValidator(a_number)
TimeText = BeforeValidator(not_a_number)
WireTime = Annotated[AwareDatetime, TimeText]
WireNaiveTime = Annotated[datetime, TimeText]
