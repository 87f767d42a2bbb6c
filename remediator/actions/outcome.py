"""What an action reports back: a small closed set the engine can persist and map to states.

`facts` is JSON-shaped (str/int/float/bool/None, lists, dicts) so that it can go straight into the
remediation's history: per-pod drain progress, the operation id, the plan a dry run would carry
out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Done:
    """The step's goal holds now."""

    detail: str
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Waiting:
    """Progressing; call again after `retry_after` seconds."""

    reason: str
    retry_after: float
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Held:
    """Going on would be unsafe or is forbidden; a human (or a changed cluster) must unblock."""

    reason: str
    facts: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    """The step cannot succeed."""

    reason: str
    facts: Mapping[str, Any] = field(default_factory=dict)


Outcome = Done | Waiting | Held | Failed
