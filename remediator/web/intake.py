"""The agents' intake as the operator sees it: what the push path admitted and refused (by lane,
reason and node) and what the heartbeat writer wrote, on `/metrics` and at
`GET /api/v1/agents/admission`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from fastapi import APIRouter
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import BaseModel

from remediator.ledger.sightings import HardwareSightings
from remediator.ledger.store import Ledger
from remediator.settings import Settings
from remediator.signals.admission import Admission, Limit, Limits
from remediator.store.heartbeats import HeartbeatBook
from remediator.web.access import Deps, Reader
from remediator.web.deps import WebDeps


def limits_from(settings: Settings) -> Limits:
    agents = settings.agents
    return Limits(
        heartbeat_per_node=Limit(agents.heartbeat_per_node_rate, agents.heartbeat_per_node_burst),
        signals_per_node=Limit(agents.signals_per_node_rate, agents.signals_per_node_burst),
        heartbeats=Limit(agents.heartbeats_per_second, agents.heartbeats_per_second),
    )


def fill_intake(deps: WebDeps) -> None:
    """A console built without them (tests, a read-only replica) keeps its own book and limits."""
    if deps.heartbeats is None:
        if deps.hardware is None:
            ledger = Ledger(deps.repository.session_factory, deps.settings.cluster_name, deps.clock)
            deps.hardware = HardwareSightings(ledger, deps.clock)
        deps.heartbeats = HeartbeatBook(
            deps.repository,
            deps.clock,
            silent_after=timedelta(seconds=deps.settings.agent_silent_after_seconds),
            flush_seconds=deps.settings.agents.heartbeat_flush_seconds,
            budget_per_second=deps.settings.agents.heartbeat_budget_per_second,
            also_flush=deps.hardware.flush,
        )
    if deps.admission is None:
        deps.admission = Admission(limits_from(deps.settings))


class IntakeCollector(Collector):
    """Read at scrape time from the admission's and the book's own counts."""

    def __init__(
        self, admission: Admission, book: HeartbeatBook, hardware: HardwareSightings | None
    ) -> None:
        self._admission = admission
        self._book = book
        self._hardware = hardware

    def collect(self) -> Iterator[Metric]:
        admitted, refused, _top = self._admission.snapshot()
        taken = CounterMetricFamily(
            "remediator_push_admitted",
            "Requests items the push path took, by lane (heartbeat, signals).",
            labels=["lane"],
        )
        for lane, n in admitted.items():
            taken.add_metric([lane], n)
        yield taken
        family = CounterMetricFamily(
            "remediator_push_refused",
            "Items the push path refused before storing anything, by lane and reason: node_rate "
            "(that node sends too fast, 429), overloaded (the replica is behind, 429), "
            "unknown_node (no such node in the cluster, 422), gpu_out_of_range (a signal for a "
            "GPU index beyond the node's GPUs, refused with the item's reason).",
            labels=["lane", "reason"],
        )
        for lane, reasons in refused.items():
            for reason, n in reasons.items():
                family.add_metric([lane, reason], n)
        yield family
        stats = self._book.stats()
        flushes = CounterMetricFamily(
            "remediator_heartbeat_flushes",
            "Batched heartbeat writes to the database (one transaction each).",
        )
        flushes.add_metric([], stats.flushes)
        yield flushes
        rows = CounterMetricFamily(
            "remediator_heartbeat_rows_written", "Heartbeat rows written in those batches."
        )
        rows.add_metric([], stats.rows)
        yield rows
        pending = GaugeMetricFamily(
            "remediator_heartbeat_rows_pending", "Heartbeats in memory not yet written."
        )
        pending.add_metric([], stats.pending)
        yield pending
        if self._hardware is not None:
            identities = CounterMetricFamily(
                "remediator_hardware_identities_taken",
                "Whole host identities (DMI serial, GPUs) agents sent in heartbeats.",
            )
            identities.add_metric([], self._hardware.taken)
            yield identities
            waiting = GaugeMetricFamily(
                "remediator_hardware_identities_pending",
                "Identities taken but not yet handed to the ledger (a fleet's first wave is "
                "written a batch per heartbeat flush).",
            )
            waiting.add_metric([], self._hardware.pending())
            yield waiting


def register_intake(deps: WebDeps, registry: CollectorRegistry) -> None:
    assert deps.admission is not None and deps.heartbeats is not None
    registry.register(IntakeCollector(deps.admission, deps.heartbeats, deps.hardware))


class NodeRefusals(BaseModel):
    node: str
    refused: int


class AdmissionOut(BaseModel):
    admitted: dict[str, int]
    refused: dict[str, dict[str, int]]
    most_refused_nodes: list[NodeRefusals]
    heartbeat_flushes: int
    heartbeat_rows_written: int
    heartbeat_rows_pending: int


def make_intake_router() -> APIRouter:
    router = APIRouter(tags=["agents"])

    @router.get("/api/v1/agents/admission")
    def admission(deps: Deps, _principal: Reader) -> AdmissionOut:
        """What the push path took and refused since this replica started, and the nodes it
        refused most (a flooding agent shows here first)."""
        assert deps.admission is not None and deps.heartbeats is not None
        admitted, refused, top = deps.admission.snapshot()
        stats = deps.heartbeats.stats()
        return AdmissionOut(
            admitted=admitted,
            refused=refused,
            most_refused_nodes=[NodeRefusals(node=n, refused=c) for n, c in top],
            heartbeat_flushes=stats.flushes,
            heartbeat_rows_written=stats.rows,
            heartbeat_rows_pending=stats.pending,
        )

    return router
