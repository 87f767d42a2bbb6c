"""The rack view: each NVLink domain (an NVL72 rack) as the grid of its trays, with each tray's
state, the gang jobs across them and the domain's open remediations; `GET /api/v1/domains`,
`GET /api/v1/domains/{domain}` and the `/racks` page.

The domains come from the nodes' labels (remediator/model/topology.py): a node without a usable
clique label is remediated per node and only counted here (`unplaced`); label problems (two
nodes on one tray, a clique label that does not parse, a rack label that disagrees) are listed,
not guessed. Built per request from the node informer's cache, the gang pods and the open
remediations; nothing is stored."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from remediator.kube.objects import Node, Pod
from remediator.model.states import OPEN
from remediator.model.topology import (
    CLIQUE_LABEL,
    Domain,
    Topology,
    TopologySettings,
    build_topology,
)
from remediator.remediation.steps.domain import scope_of
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.web import pages
from remediator.web.access import Reader, web_deps
from remediator.web.deps import WebDeps
from remediator.web.problems import ERRORS, WebError

GANG_LABEL = "remediator.io/gang"
TRAYS_PER_RACK = 18  # an NVL72 rack's compute trays
OPEN_LIMIT = 1000
DOMAIN_ID = r"^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$"
_DIGITS = re.compile(r"(\d+)")

TrayState = Literal["Ready", "cordoned", "spare", "in remediation", "NotReady", "empty"]


class TrayOut(BaseModel):
    slot: int | None = Field(description="the tray's slot (0-17); None: no believed position")
    node: str | None = Field(description="None: no node claims this slot")
    state: TrayState
    clique: int | None = None
    gpus: int | None = None
    remediation: int | None = Field(
        default=None, description="the open remediation holding it: its own, or its unit's"
    )
    covered_by: str | None = Field(
        default=None,
        description="the faulty tray whose clique or domain remediation holds this one",
    )


class GangJobOut(BaseModel):
    namespace: str
    name: str
    nodes: list[str] = Field(description="the domain's trays its pods run on")
    running: int = Field(description="its pods Running and not being deleted")
    terminating: int = Field(default=0, description="its pods being deleted")
    pending: int = Field(description="its pods not placed on any node yet")


class DomainRemediationOut(BaseModel):
    id: int
    node: str
    policy: str
    state: str


class DomainOut(BaseModel):
    id: str = Field(description="the NVLink domain: the clique label's clusterUUID")
    rack: str | None
    trays: list[TrayOut] = Field(description="the 18 slots in order, then trays without a slot")
    counts: dict[str, int]
    jobs: list[GangJobOut]
    remediations: list[DomainRemediationOut]


class DomainsOut(BaseModel):
    domains: list[DomainOut]
    unplaced: int = Field(description="nodes without a usable clique label: remediated per node")
    unplaced_nodes: list[str]
    problems: list[str]
    error: str | None = Field(default=None, description="why the cluster could not be read")


def _state(node: Node, spare: bool, remediation: int | None) -> TrayState:
    if remediation is not None:
        return "in remediation"
    if not node.ready:
        return "NotReady"
    if spare:
        return "spare"
    return "cordoned" if node.unschedulable else "Ready"


def _jobs(domain: Domain, pods: Iterable[Pod]) -> list[GangJobOut]:
    members = set(domain.nodes)
    by_gang: dict[tuple[str, str], list[Pod]] = defaultdict(list)
    for pod in pods:
        gang = pod.labels.get(GANG_LABEL)
        if gang:
            by_gang[(pod.namespace, gang)].append(pod)
    jobs = []
    for (namespace, name), gang_pods in sorted(by_gang.items()):
        here = sorted({p.node_name for p in gang_pods if p.node_name in members})
        if not here:
            continue
        jobs.append(
            GangJobOut(
                namespace=namespace,
                name=name,
                nodes=here,
                running=sum(
                    1 for p in gang_pods if p.phase == "Running" and p.deletion_timestamp is None
                ),
                terminating=sum(1 for p in gang_pods if p.deletion_timestamp is not None),
                pending=sum(1 for p in gang_pods if not p.node_name),
            )
        )
    return jobs


def _domain(
    domain: Domain,
    nodes: dict[str, Node],
    pods: Sequence[Pod],
    open_by_node: dict[str, RemediationRecord],
) -> DomainOut:
    by_slot = {p.tray: p for p in domain.trays if p.tray is not None}
    slots = range(max([TRAYS_PER_RACK - 1, *by_slot]) + 1)
    unslotted = [p for p in domain.trays if p.tray is None]
    trays: list[TrayOut] = []
    for place in [by_slot.get(slot) for slot in slots] + unslotted:
        if place is None:
            trays.append(TrayOut(slot=len(trays), node=None, state="empty"))
            continue
        node = nodes[place.node]
        record = open_by_node.get(place.node)
        rid = record.id if record is not None else None
        trays.append(
            TrayOut(
                slot=place.tray,
                node=place.node,
                state=_state(node, place.spare, rid),
                clique=place.clique.clique_id,
                gpus=node.gpus,
                remediation=rid,
                covered_by=record.node if record and record.node != place.node else None,
            )
        )
    counts: dict[str, int] = defaultdict(int)
    for tray in trays:
        if tray.node is not None:
            counts[tray.state] += 1
    held = {open_by_node[n].id: open_by_node[n] for n in domain.nodes if n in open_by_node}
    remediations = [
        DomainRemediationOut(id=r.id, node=r.node, policy=r.policy, state=r.state.value)
        for r in sorted(held.values(), key=lambda r: r.id)
    ]
    return DomainOut(
        id=domain.name,
        rack=domain.rack,
        trays=trays,
        counts=dict(counts),
        jobs=_jobs(domain, pods),
        remediations=remediations,
    )


def natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """Name order as a person reads it: rack-2 before rack-10."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _DIGITS.split(name))


def holding(
    open_records: Sequence[RemediationRecord], topology: Topology
) -> dict[str, RemediationRecord]:
    """node → the open remediation holding it: its own, else its clique's or domain's (the
    scope and unit its timeline recorded), the oldest first."""
    ordered = sorted(open_records, key=lambda r: r.id)
    held: dict[str, RemediationRecord] = {}
    for record in ordered:
        held.setdefault(record.node, record)
    for record in ordered:
        scoped = scope_of(record)
        if scoped is None:
            continue
        scope, unit = scoped
        if scope == "clique":
            members: tuple[str, ...] = topology.clique_of(record.node)
        else:
            domain = topology.domains.get(unit)
            members = domain.nodes if domain is not None else ()
        for node in members:
            held.setdefault(node, record)
    return held


def domains_out(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    open_records: Sequence[RemediationRecord],
    settings: TopologySettings,
) -> DomainsOut:
    """The rack view of these nodes (pure)."""
    topology: Topology = build_topology({n.name: n.labels for n in nodes}, settings)
    by_name = {n.name: n for n in nodes}
    open_by_node = holding(open_records, topology)
    ordered = sorted(topology.domains.values(), key=lambda d: natural(d.rack or d.name))
    return DomainsOut(
        domains=[_domain(d, by_name, pods, open_by_node) for d in ordered],
        unplaced=len(topology.per_node),
        unplaced_nodes=list(topology.per_node),
        problems=[p.detail for p in topology.problems],
    )


def read_domains(deps: WebDeps) -> DomainsOut:
    if deps.list_nodes is None:
        return DomainsOut(
            domains=[],
            unplaced=0,
            unplaced_nodes=[],
            problems=[],
            error="this console has no access to the cluster",
        )
    nodes = deps.list_nodes()
    pods = deps.list_gang_pods() if deps.list_gang_pods is not None else []
    records = deps.repository.list(RemediationFilter(states=OPEN), limit=OPEN_LIMIT).rows
    # The timelines (their scope and unit) only of those on a tray: few, in two queries.
    placed = {n.name for n in nodes if CLIQUE_LABEL in n.labels}
    records = deps.repository.with_events([r for r in records if r.node in placed])
    return domains_out(nodes, pods, records, deps.settings.topology)


def make_racks_router() -> APIRouter:
    router = APIRouter()

    @router.get("/api/v1/domains", tags=["domains"], responses=ERRORS)
    def list_domains(request: Request, principal: Reader) -> DomainsOut:
        """Every NVLink domain with its trays, gang jobs and open remediations."""
        return read_domains(web_deps(request))

    @router.get("/api/v1/domains/{domain}", tags=["domains"], responses=ERRORS)
    def get_domain(
        request: Request,
        principal: Reader,
        domain: Annotated[str, Path(max_length=253, pattern=DOMAIN_ID)],
    ) -> DomainOut:
        """One NVLink domain (its clique label's clusterUUID)."""
        for found in read_domains(web_deps(request)).domains:
            if found.id == domain:
                return found
        raise WebError(404, f"no NVLink domain {domain!r} among the cluster's nodes")

    @router.get("/racks", response_class=HTMLResponse, include_in_schema=False)
    def racks_page(request: Request, principal: Reader) -> HTMLResponse:
        return pages.render(request, "racks.html", principal, view=read_domains(web_deps(request)))

    return router
