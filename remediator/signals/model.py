"""The one shape every source turns its observations into; policies only ever see this."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field


class SignalKind(StrEnum):
    XID = "xid"
    THERMAL = "thermal"
    NVLINK = "nvlink"
    INFINIBAND = "infiniband"
    ECC = "ecc"
    ROW_REMAP = "row_remap"
    GPU_MISSING = "gpu_missing"
    NODE_CONDITION = "node_condition"


class Signal(BaseModel):
    """One observation about one node (and GPU, when known).

    `code` carries the discrete part (the XID number, the condition type's status as 1/0, …),
    `value` the measured part (°C, errors in the window, …). Frozen so that it can be shared
    between the sources, the evaluator and the store without defensive copies.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # No whitespace or control characters: a NUL from a pushed signal would otherwise reach
    # PostgreSQL (which refuses it) long after the push was accepted.
    node: str = Field(min_length=1, max_length=253, pattern=r"^[^\x00-\x20\x7f]+$")
    kind: SignalKind
    source: str = Field(min_length=1, max_length=64)
    observed_at: AwareDatetime
    gpu: int | None = Field(default=None, ge=0, le=1023)
    gpu_uuid: str | None = None
    code: int | None = None
    value: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((*self.dedup_key, self.source, self.observed_at, self.value))

    @property
    def dedup_key(self) -> tuple[str, int | None, SignalKind, int | None]:
        """Two signals with the same key inside the fold window are one fault."""
        return (self.node, self.gpu, self.kind, self.code)

    def at(self, when: datetime) -> Signal:
        return self.model_copy(update={"observed_at": when})
