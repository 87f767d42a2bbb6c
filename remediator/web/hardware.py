"""The hardware ledger in the console (issue #28): `GET /api/v1/gpus`, `/api/v1/gpus/{uuid}`,
`/api/v1/machines/{id}` and the /gpus/{uuid} and /machines/{id} pages (a GPU's life: the nodes
it sat in, its faults by XID, its diagnostics and remediations; a machine's, with its
quarantine). `POST /api/v1/machines/{id}/lift-quarantine` (and the page's form) returns a
quarantined machine to service: an operator's command with a reason, audited, CSRF-checked for
a browser session as every other command.

GPUs and machines are fleet-wide; a cluster-scoped token sees only what happened in its
clusters, and a GPU or machine never seen in them is 404, as a node of another cluster is."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel, ConfigDict, Field

from remediator.ledger.identity import MACHINE_ID
from remediator.ledger.store import (
    HOLD,
    PLACED,
    REMEDIATION,
    SIGNAL,
    VERDICT,
    Conflict,
    GpuLife,
    GpuSummary,
    Ledger,
    Link,
    MachineLife,
    Placement,
)
from remediator.web.access import Deps, Reader, require_reader
from remediator.web.auth import Principal
from remediator.web.deps import WebDeps
from remediator.web.oncall import Asked, asker_for, record_command
from remediator.web.pages import render
from remediator.web.problems import ERRORS, WebError
from remediator.web.schemas import PRINTABLE, SAID

GPU_UUID = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
Uuid = Annotated[str, Path(max_length=128, pattern=GPU_UUID, description="GPU-… as NVML says")]
MachineId = Annotated[str, Path(max_length=256, pattern=MACHINE_ID)]
SHOWN = 500


class GpuOut(BaseModel):
    uuid: str
    serial: str | None = Field(description="board serial (nvidia-smi), when reported")
    model: str | None
    vbios: str | None
    driver: str | None
    first_seen_at: datetime
    last_seen_at: datetime
    faults: int = Field(description="signals linked to this GPU")


class PlacementOut(BaseModel):
    gpu_uuid: str
    machine_id: str | None
    cluster: str
    node: str
    pci_bus_id: str | None
    gpu_index: int | None
    from_at: datetime
    to_at: datetime | None = Field(description="None: it sits there now")


class LinkOut(BaseModel):
    cluster: str
    node: str
    remediation_id: int | None
    gpu_uuid: str | None
    kind: str
    code: int | None
    at: datetime
    detail: dict[str, Any]


class ConflictOut(BaseModel):
    cluster: str
    node: str
    machine_id: str | None
    pci_bus_id: str
    known_uuid: str
    seen_uuid: str = Field(description="a second UUID at the address: a swapped card")
    at: datetime


class GpuListOut(BaseModel):
    gpus: list[GpuOut]


class GpuLifeOut(BaseModel):
    gpu: GpuOut
    placements: list[PlacementOut]
    faults_by_xid: dict[str, int]
    faults: list[LinkOut]
    diagnostics: list[LinkOut]
    remediations: list[LinkOut]
    conflicts: list[ConflictOut]


class MachineOut(BaseModel):
    id: str
    provider_id: str | None
    dmi_serial: str | None
    cluster: str
    node: str
    first_seen_at: datetime
    last_seen_at: datetime
    quarantined_at: datetime | None = Field(description="None: not quarantined (or lifted)")
    quarantine_reason: str | None
    quarantined_by: int | None = Field(description="the remediation whose strike held it")
    hold_lifted_at: datetime | None = Field(description="when an operator last lifted a hold")
    holds: list[LinkOut] = Field(
        description="each hold put on (`held`), lifted (`lifted`) or enforced on a node found on"
        " the machine (`fenced`)"
    )
    nodes: list[LinkOut] = Field(
        description="each node name (or cluster) the machine was seen under, newest first, "
        "with the one before in `detail` (`was_node`): from its agent's heartbeats or signals"
    )
    placements: list[PlacementOut]
    faults: list[LinkOut]
    diagnostics: list[LinkOut]
    remediations: list[LinkOut]


def _gpu(summary: GpuSummary) -> GpuOut:
    return GpuOut(
        uuid=summary.uuid,
        serial=summary.serial,
        model=summary.model,
        vbios=summary.vbios,
        driver=summary.driver,
        first_seen_at=summary.first_seen_at,
        last_seen_at=summary.last_seen_at,
        faults=summary.faults,
    )


def _placement(p: Placement) -> PlacementOut:
    return PlacementOut(
        gpu_uuid=p.gpu_uuid,
        machine_id=p.machine_id,
        cluster=p.cluster,
        node=p.node,
        pci_bus_id=p.pci_bus_id,
        gpu_index=p.gpu_index,
        from_at=p.from_at,
        to_at=p.to_at,
    )


def _links(links: tuple[Link, ...], subject: str) -> list[LinkOut]:
    chosen = [link for link in links if link.subject == subject][-SHOWN:]
    return [
        LinkOut(
            cluster=link.cluster,
            node=link.node,
            remediation_id=link.ref_id,
            gpu_uuid=link.gpu_uuid,
            kind=link.kind,
            code=link.code,
            at=link.at,
            detail=link.detail,
        )
        for link in reversed(chosen)
    ]


def _conflict(c: Conflict) -> ConflictOut:
    return ConflictOut(
        cluster=c.cluster,
        node=c.node,
        machine_id=c.machine_id,
        pci_bus_id=c.pci_bus_id,
        known_uuid=c.known_uuid,
        seen_uuid=c.seen_uuid,
        at=c.at,
    )


def life_out(life: GpuLife) -> GpuLifeOut:
    return GpuLifeOut(
        gpu=_gpu(life.gpu),
        placements=[_placement(p) for p in life.placements],
        faults_by_xid={str(code): n for code, n in life.faults_by_xid.items()},
        faults=_links(life.links, SIGNAL),
        diagnostics=_links(life.links, VERDICT),
        remediations=_links(life.links, REMEDIATION),
        conflicts=[_conflict(c) for c in life.conflicts],
    )


def machine_out(life: MachineLife) -> MachineOut:
    return MachineOut(
        id=life.id,
        provider_id=life.provider_id,
        dmi_serial=life.dmi_serial,
        cluster=life.cluster,
        node=life.node,
        first_seen_at=life.first_seen_at,
        last_seen_at=life.last_seen_at,
        quarantined_at=life.quarantined_at,
        quarantine_reason=life.quarantine_reason,
        quarantined_by=life.quarantined_by,
        hold_lifted_at=life.hold_lifted_at,
        holds=_links(life.links, HOLD),
        nodes=_links(life.links, PLACED),
        placements=[_placement(p) for p in life.placements],
        faults=_links(life.links, SIGNAL),
        diagnostics=_links(life.links, VERDICT),
        remediations=_links(life.links, REMEDIATION),
    )


def ledger_of(deps: WebDeps) -> Ledger:
    return Ledger(deps.repository.session_factory, deps.settings.cluster_name, deps.clock)


def _scope(principal: Principal) -> frozenset[str] | None:
    return principal.clusters


def gpu_life(deps: WebDeps, principal: Principal, uuid: str) -> GpuLife:
    life = ledger_of(deps).gpu(uuid, _scope(principal))
    if life is None:
        raise WebError(404, f"no GPU {uuid} in the ledger")
    return life


def machine_life(deps: WebDeps, principal: Principal, machine_id: str) -> MachineLife:
    life = ledger_of(deps).machine(machine_id, _scope(principal))
    if life is None:
        raise WebError(404, f"no machine {machine_id} in the ledger")
    return life


LIFT = "lift-quarantine"
LiftAsker = Annotated[Asked, Depends(asker_for(LIFT))]


class LiftIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        min_length=1, max_length=500, pattern=SAID, description="why; not only spaces"
    )


def lift(ask: Asked, machine_id: str, reason: str) -> MachineLife:
    """Lift the machine's quarantine; 404 for a machine this token cannot see, 409 when it is
    not quarantined. Done and refused alike are audited with the reason."""
    reason = reason.strip()
    ledger = ledger_of(ask.deps)
    life = ledger.machine(machine_id, _scope(ask.principal))

    def audit(outcome: str, detail: str, remediation_id: int | None) -> None:
        record_command(ask, LIFT, outcome, reason, remediation_id, detail, f"machine {machine_id}")

    if life is None:
        audit("refused", f"machine {machine_id}: not in the ledger", None)
        raise WebError(404, f"no machine {machine_id} in the ledger")
    if life.quarantined_at is None:
        audit("refused", f"machine {machine_id}: not quarantined", None)
        raise WebError(409, f"machine {machine_id} is not quarantined")
    ledger.lift(machine_id, ask.deps.clock.now(), actor=ask.principal.actor, reason=reason)
    audit("done", f"machine {machine_id}: was {life.quarantine_reason}", life.quarantined_by)
    lifted = ledger.machine(machine_id, _scope(ask.principal))
    assert lifted is not None
    return lifted


def make_hardware_router() -> APIRouter:
    router = APIRouter()
    api = APIRouter(prefix="/api/v1", tags=["console"], responses=ERRORS)

    @api.get("/gpus", dependencies=[Depends(require_reader)])
    def list_gpus(
        deps: Deps,
        principal: Reader,
        model: Annotated[str | None, Query(max_length=128, pattern=PRINTABLE)] = None,
        cluster: Annotated[str | None, Query(max_length=128, pattern=PRINTABLE)] = None,
        min_faults: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    ) -> GpuListOut:
        """GPUs of the ledger, most faults first (at most 500)."""
        if cluster is not None and not principal.may_see(cluster):
            raise WebError(403, f"your token is not for cluster {cluster}")
        found = ledger_of(deps).gpus(
            model=model,
            cluster=cluster,
            clusters=_scope(principal),
            min_faults=min_faults,
            limit=SHOWN,
        )
        return GpuListOut(gpus=[_gpu(g) for g in found])

    @api.get("/gpus/{uuid}")
    def get_gpu(deps: Deps, principal: Reader, uuid: Uuid) -> GpuLifeOut:
        """A GPU's life: where it sat, its faults by XID, diagnostics, remediations."""
        return life_out(gpu_life(deps, principal, uuid))

    @api.get("/machines/{machine_id}")
    def get_machine(deps: Deps, principal: Reader, machine_id: MachineId) -> MachineOut:
        """A machine's life: its GPUs over time, faults, diagnostics, remediations."""
        return machine_out(machine_life(deps, principal, machine_id))

    @api.post(f"/machines/{{machine_id}}/{LIFT}", responses={**ERRORS, 409: ERRORS[409]})
    def lift_quarantine(
        ask: LiftAsker, machine_id: MachineId, body: Annotated[LiftIn, Body()]
    ) -> MachineOut:
        """Return a quarantined machine to service (an operator; audited). Its strikes so far
        count no more; the node it is fenced on is released by retrying its remediation."""
        return machine_out(lift(ask, machine_id, body.reason))

    @router.post(f"/machines/{{machine_id}}/{LIFT}", include_in_schema=False)
    def lift_form(
        ask: LiftAsker,
        machine_id: MachineId,
        reason: Annotated[str, Form(min_length=1, max_length=500, pattern=SAID)],
    ) -> RedirectResponse:
        lift(ask, machine_id, reason)
        return RedirectResponse(f"/machines/{machine_id}", 303)

    @router.get("/gpus/{uuid}", response_class=HTMLResponse, include_in_schema=False)
    def gpu_page(request: Request, deps: Deps, principal: Reader, uuid: Uuid) -> HTMLResponse:
        return render(
            request, "gpu.html", principal, life=life_out(gpu_life(deps, principal, uuid))
        )

    @router.get("/machines/{machine_id}", response_class=HTMLResponse, include_in_schema=False)
    def machine_page(
        request: Request, deps: Deps, principal: Reader, machine_id: MachineId
    ) -> HTMLResponse:
        life = machine_out(machine_life(deps, principal, machine_id))
        return render(request, "machine.html", principal, machine=life)

    router.include_router(api)
    return router
