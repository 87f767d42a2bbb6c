"""Node agents: their heartbeats come in here (push-only tokens may send them) and their
liveness goes out to the console, the API and `/metrics`.

A heartbeat is one row per node, overwritten; an agent that stopped sending is *silent*, and
its node's health is *unknown* — never "healthy", because nothing the agent would have seen (an
XID, a vanished GPU) can be ruled out.

A heartbeat costs no database write of its own: it updates the replica's `HeartbeatBook`, which
writes the rows that changed in one batch every few seconds (a background task after the answer,
never in the request). Before that it is admitted (`signals.admission`): a node sending too fast
or a replica that is behind answers 429 with Retry-After; a node the cluster does not have is
refused (422) like a signal for an unknown node. Every refusal is counted.

A heartbeat also names the hardware its agent runs on (docs/agent.md): whole on the first, a
digest after. Answering costs one dictionary lookup (`ledger.sightings`); what came whole is
written to the ledger with the book's flush, only when it changed.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from remediator.ledger.identity import DIGEST_PATTERN, GpuIdentity, HostHardware
from remediator.signals.admission import Lane, Refusal, retry_after
from remediator.signals.wire import Number, WireTime
from remediator.store.heartbeats import HeartbeatBook
from remediator.web.access import Deps, Pusher, Reader
from remediator.web.agent_views import AgentOut, agents_out
from remediator.web.deps import WebDeps
from remediator.web.problems import ERRORS
from remediator.web.schemas import ErrorOut

log = logging.getLogger(__name__)

NODE_PATTERN = r"^[^\x00-\x20\x7f]+$"
# No control characters anywhere: PostgreSQL refuses NUL in text, and the console shows these.
Printable = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]+$")]
# JSON's exact integers (2**53 - 1): a bound a client and a schema checker read as the same
# number, where 2**62 rounds in a double (a value past it passed the schema and was refused).
MAX_COUNTER = 2**53 - 1
# A dict's keys are validated by pydantic but left out of its JSON schema: say them here.
StatsKeys = WithJsonSchema(
    {
        "type": "object",
        "maxProperties": 64,
        "propertyNames": {"minLength": 1, "maxLength": 64, "pattern": r"^[^\x00-\x1f\x7f]+$"},
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_COUNTER},
    }
)
Counter = Annotated[int, Number, Field(ge=0, le=MAX_COUNTER)]


TEXT = r"^[^\x00-\x1f\x7f]+$"


class GpuIn(BaseModel):
    """One GPU as the agent read it: the driver's UUID, PCI address and minor number, model;
    nvidia-smi's board serial, VBIOS and driver version when it ran."""

    model_config = ConfigDict(extra="forbid")

    uuid: str = Field(min_length=5, max_length=128, pattern=r"^GPU-[^\x00-\x20\x7f]+$")
    pci_bus_id: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}$", description="DDDD:BB:DD"
    )
    index: Annotated[int | None, Number] = Field(default=None, ge=0, le=1023)
    serial: str | None = Field(default=None, min_length=1, max_length=64, pattern=TEXT)
    model: str | None = Field(default=None, min_length=1, max_length=128, pattern=TEXT)
    vbios: str | None = Field(default=None, min_length=1, max_length=64, pattern=TEXT)
    driver: str | None = Field(default=None, min_length=1, max_length=64, pattern=TEXT)

    def identity(self) -> GpuIdentity:
        return GpuIdentity(
            uuid=self.uuid,
            pci_bus_id=self.pci_bus_id,
            index=self.index,
            serial=self.serial,
            model=self.model,
            vbios=self.vbios,
            driver=self.driver,
        )


class HardwareIn(BaseModel):
    """The agent's host: the machine's DMI serial (/sys/class/dmi/id/product_serial) and its
    GPUs. docs/agent.md: sent whole on the first heartbeat and when the answer asks."""

    model_config = ConfigDict(extra="forbid")

    dmi_serial: str | None = Field(default=None, min_length=1, max_length=128, pattern=TEXT)
    gpus: list[GpuIn] = Field(default_factory=list, max_length=64)

    def host(self) -> HostHardware:
        return HostHardware(self.dmi_serial, tuple(g.identity() for g in self.gpus))


class HeartbeatIn(BaseModel):
    """What an agent says about itself: who, since when, its counters, and the hardware it runs
    on (whole, or as the digest of what it sent whole before)."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(min_length=1, max_length=253, pattern=NODE_PATTERN)
    agent: str = Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")
    version: Printable
    started_at: WireTime
    stats: Annotated[dict[Printable, Counter], StatsKeys] = Field(
        default_factory=dict, max_length=64
    )
    hardware_digest: str | None = Field(
        default=None,
        pattern=DIGEST_PATTERN,
        description="names the identity sent whole before (the agent's: 16 hex digits of "
        "SHA-256 over the canonical `hardware`, docs/agent.md); the controller keeps it as given",
    )
    hardware: HardwareIn | None = Field(
        default=None, description="whole, on the first heartbeat and when the answer asks"
    )

    @field_validator("started_at")
    @classmethod
    def _in_utc(cls, value: datetime) -> datetime:
        try:
            return value.astimezone(UTC)
        except OverflowError as exc:  # 0001-01-01T00:00+01:00 has no UTC time
            raise ValueError("outside the range of UTC times") from exc


class HeartbeatOut(BaseModel):
    recorded: bool
    silent_after_seconds: float
    # The least period the controller asks of every agent, for its heartbeat budget (0: keep
    # your own); an agent keeps its own period when that is longer.
    next_heartbeat_seconds: float = Field(ge=0)
    send_hardware: bool = Field(
        default=False,
        description="send `hardware` whole on the next heartbeat: this replica does not hold "
        "the identity of the digest sent",
    )


def take_heartbeat(
    deps: WebDeps, body: HeartbeatIn
) -> tuple[int, dict[str, Any], dict[str, str], bool]:
    """The heartbeat's whole decision, shared by the route and the fast lane: (status, JSON
    answer, headers, whether the caller should run a flush after answering). Memory only."""
    admission, book = deps.admission, deps.heartbeats
    assert admission is not None and book is not None  # create_app fills them in
    refused = admission.heartbeat(body.node)
    if refused is not None:
        reason, wait = refused
        spread = 0.0 if reason is Refusal.NODE_RATE else 5.0
        after = retry_after(wait, spread)
        text = (
            f"{body.node} sends heartbeats faster than "
            f"{admission.limits.heartbeat_per_node.rate:g}/s"
            if reason is Refusal.NODE_RATE
            else "this replica is behind on heartbeats"
        )
        answer = {"reason": f"{text}: retry after {after} s", "detail": reason.value}
        return 429, answer, {"Retry-After": str(after)}, False
    if deps.node_known(body.node) is False:
        admission.count(Lane.HEARTBEAT, body.node, Refusal.UNKNOWN_NODE)
        answer = {
            "reason": f"{body.node}: no such node in the cluster",
            "detail": Refusal.UNKNOWN_NODE.value,
        }
        return 422, answer, {}, False
    book.record(
        body.node,
        agent=body.agent,
        version=body.version,
        started_at=body.started_at,
        stats=body.stats,
    )
    hardware = body.hardware.host() if body.hardware is not None else None
    sightings = deps.hardware
    digest = body.hardware_digest or (hardware.digest if hardware is not None else None)
    asks = sightings is not None and sightings.heard(body.node, digest, hardware)
    out = {
        "recorded": True,
        "silent_after_seconds": book.silent_after.total_seconds(),
        "next_heartbeat_seconds": round(book.asked_period(), 1),
        "send_hardware": asks,
    }
    return 200, out, {}, book.claim_flush()


def make_agents_router() -> APIRouter:
    # Errors answer {"reason", "detail"} like the rest of the API (app's handlers): documented
    # so, or clients and schema checks would expect FastAPI's default 422 shape.
    router = APIRouter(
        tags=["agents"],
        responses={code: ERRORS[code] for code in (400, 401, 403, 422)},
    )

    @router.post(
        "/api/v1/agents/heartbeat",
        response_model=HeartbeatOut,
        responses={
            429: {"model": ErrorOut, "description": "too fast: retry after `Retry-After` s"}
        },
    )
    async def heartbeat(
        body: HeartbeatIn, deps: Deps, _principal: Pusher, background: BackgroundTasks
    ) -> HeartbeatOut | Response:
        """A node agent is alive; push-only tokens may call this. 429: slow down, as the
        Retry-After header says."""
        status, answer, headers, flush = take_heartbeat(deps, body)
        if flush:
            background.add_task(flush_quietly, deps.heartbeats)
        if status == 200:
            return HeartbeatOut.model_validate(answer)
        return JSONResponse(answer, status, headers=headers)

    @router.get("/api/v1/agents")
    def agents(deps: Deps, _principal: Reader) -> list[AgentOut]:
        """Every node agent that ever reported or has a pod, those not reporting (silent,
        crash-looping, not deployed) first, each with the reason."""
        return agents_out(deps)[1]

    return router


def flush_quietly(book: HeartbeatBook | None) -> None:
    """The background flush: a database that cannot take it keeps the rows pending (the next
    flush retries them); the heartbeat was already answered."""
    if book is None:
        return
    try:
        book.flush()
    except Exception:
        log.exception("heartbeats: batched write failed, rows stay pending")
