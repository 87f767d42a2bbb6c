"""The one shape every source turns its observations into; policies only ever see this."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from remediator.signals import bounds
from remediator.signals.kinds import SignalKind
from remediator.signals.wire import Number, WireTime

__all__ = ["SINCE_AFTER_OBSERVED", "STORED", "Signal", "SignalKind"]

# Validation context for signals read back from the database: history is shown as it was
# recorded, not judged again by today's input bounds (rows from before a bound existed).
STORED = {"stored": True}
# The error type of a `since` after `observed_at`.
SINCE_AFTER_OBSERVED = "since_after_observed"


def _stored(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("stored"))


class Signal(BaseModel):
    """One observation about one node (and GPU, when known).

    `code` carries the discrete part (the XID number, the condition type's status as 1/0, …),
    `value` the measured part (°C, errors in the window, …). `since` is set by sources that
    report a lasting state rather than a reading (a firing Alertmanager alert): the time the
    state began, from which a threshold's `for` is counted. Frozen so that it can be shared
    between the sources, the evaluator and the store without defensive copies; bounded (see
    `bounds`) so that nothing out of range can be built, stored or evaluated.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str = Field(
        min_length=1,
        max_length=bounds.MAX_NODE_NAME,
        # Checked by the validator below (stored rows are not re-checked); stated for clients.
        json_schema_extra={"pattern": f"^{bounds.NODE_NAME.pattern}$"},
    )
    kind: SignalKind
    source: str = Field(min_length=1, max_length=64)
    observed_at: WireTime
    gpu: Annotated[int | None, Number] = Field(default=None, ge=0, le=bounds.MAX_GPU_INDEX)
    gpu_uuid: str | None = Field(default=None, max_length=128)
    code: Annotated[int | None, Number] = None
    value: Annotated[float | None, Number] = None
    since: WireTime | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("node")
    @classmethod
    def _node_name(cls, node: str, info: ValidationInfo) -> str:
        problem = None if _stored(info) else bounds.node_name_problem(node)
        if problem is not None:
            raise ValueError(problem)
        return node

    @model_validator(mode="after")
    def _bounded(self, info: ValidationInfo) -> Signal:
        if _stored(info):
            return self
        problem = bounds.code_problem(self.kind, self.code) or bounds.value_problem(
            self.kind, self.value
        )
        if problem is not None:
            raise ValueError(problem)
        if self.since is not None and self.since > self.observed_at:
            # Its own type: a rule between two fields, which no JSON schema can state.
            raise PydanticCustomError(SINCE_AFTER_OBSERVED, "since must not be after observed_at")
        return self

    def __hash__(self) -> int:
        return hash((*self.dedup_key, self.source, self.observed_at, self.value))

    @property
    def dedup_key(self) -> tuple[str, int | str | None, SignalKind, int | None]:
        """Two signals with the same key inside the fold window are one fault. The GPU is its
        UUID when the signal has one (the intake gives one to a signal of a GPU the ledger has
        placed), else its index: a new GPU in the slot of a recreated instance is another GPU,
        not the old one's fault again."""
        return (self.node, self.gpu_uuid or self.gpu, self.kind, self.code)

    def at(self, when: datetime) -> Signal:
        return self.model_copy(update={"observed_at": when})
