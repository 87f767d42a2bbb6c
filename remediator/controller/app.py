"""The composition root: builds every part from the settings and runs them.

Every replica serves the console (read-only state from the database; commands write to it) and
keeps its policy view and metrics fresh. Only the replica holding the Lease runs the scheduler
whose jobs poll the sources, open remediations, advance them and reconcile the nodes; losing the
lease stops the scheduler, and every action checks leadership again before touching anything.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import uvicorn
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry, disable_created_metrics
from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from remediator import __version__
from remediator.actions.jobs import JobSettings
from remediator.actions.notify import Notification, NotificationKind, WebhookNotifier
from remediator.clock import Clock, SystemClock
from remediator.controller.jobs import (
    ADVANCE_JOB,
    JobSpec,
    WakeLoop,
    build_scheduler,
    wake,
    wake_at,
)
from remediator.controller.metrics import ControllerMetrics
from remediator.controller.node_lookup import node_gpus
from remediator.errors import NotFoundError, RemediatorError
from remediator.fences.derive import failed_machine, validated_nodes
from remediator.fences.marks import FenceIdentity
from remediator.fences.owner import FenceOwner
from remediator.kube.agent_pods import AgentPods, liveness_judge
from remediator.kube.client import KubeClient
from remediator.kube.informer import NodeInformer
from remediator.kube.leader import LeaderElector, default_identity
from remediator.kube.objects import Node, Taint
from remediator.kube.ratelimit import TokenBucket
from remediator.kube.waits import NodeActivity
from remediator.ledger.sightings import HardwareSightings
from remediator.ledger.store import Ledger
from remediator.model.optout import DEFAULT_MAX_HOLD
from remediator.model.states import State
from remediator.policy.budget import HoldCause
from remediator.policy.interest import interest_of
from remediator.policy.loader import content_hash, git_revision, policy_files
from remediator.policy.schema import MachineHoldSettings
from remediator.policy.startup import startup_taint_warning
from remediator.policy.watcher import PolicyStore
from remediator.providers.base import NodePoolProvider
from remediator.providers.instrumented import InstrumentedProvider, ProviderMetrics
from remediator.providers.select import PoolProviders
from remediator.remediation.intake import Intake, IntakeResult, Inventory, InventoryCache
from remediator.remediation.machine_hold import MachineHolds
from remediator.remediation.node_gone import end_all_gone
from remediator.remediation.planned import pods_from
from remediator.remediation.service import RemediationService, TransitionSeen
from remediator.rma.book import RmaBook
from remediator.rma.ledger_source import LedgerHardware
from remediator.rma.model import RmaCase
from remediator.rma.webhook import RmaWebhook
from remediator.settings import Settings, SignalSettings
from remediator.signals.admission import Admission
from remediator.signals.model import Signal
from remediator.signals.screen import DropReason, RecentDrops, summary
from remediator.signals.sources.alert_state import FiringAlerts
from remediator.signals.sources.alertmanager_api import AlertmanagerAPI
from remediator.signals.sources.base import Source, SourceResult
from remediator.signals.sources.cloud_maintenance import maintenance_sources
from remediator.signals.sources.node_conditions import NodeConditionSource
from remediator.signals.sources.prometheus import PrometheusSource, PrometheusSourceConfig
from remediator.signals.sources.push import InboxUnavailable, SignalInbox
from remediator.slurm.client import SlurmCli
from remediator.slurm.engine import SlurmSteps
from remediator.slurm.source import SlurmNodeSource
from remediator.store.archive import SignalArchive
from remediator.store.clusters import ClusterRegistry
from remediator.store.db import make_engine, make_session_factory
from remediator.store.fences import FenceAction, FenceBook
from remediator.store.fleet_breaker import FleetBreakerStore
from remediator.store.heartbeats import HeartbeatBook
from remediator.store.optouts import Asker, OptOutBook
from remediator.store.records import RemediationFilter, RemediationRecord
from remediator.store.repository import Repository
from remediator.web.app import create_app
from remediator.web.deps import WebDeps
from remediator.web.intake import limits_from
from remediator.web.racks import GANG_LABEL
from remediator.web.server import QuietServer

log = logging.getLogger(__name__)

HOUSEKEEPING_SECONDS = 2.0
RECONCILE_SECONDS = 10.0
# How often due RMA webhook deliveries are looked for (each case keeps its own backoff).
RMA_WEBHOOK_SECONDS = 5.0
HEARTBEAT_SECONDS = 10.0
ARCHIVE_RETENTION_SECONDS = 3600.0
# Pushes are taken when they arrive (a put wakes the loop); this only bounds a missed wake.
PUSH_FALLBACK_SECONDS = 60.0
PUSH_LOOP = "push"
# How old the node inventory may be when queued remediations are offered to the budgets again.
INVENTORY_MAX_AGE_SECONDS = 1.0
# A selector no node carries: the cheapest request that proves the API server answers.
PROBE_SELECTOR = "remediator.io/readiness-probe=none"
# An idle client connection is kept this long: past the agents' longest wait between heartbeats
# (10 s +20 %, or a Retry-After of up to 15 s), so every agent keeps one connection instead of
# opening one per heartbeat (uvicorn's default of 5 s: 1,000 accepts a second at 10,000 agents).
KEEP_ALIVE_SECONDS = 75
# Connections waiting to be accepted: 10,000 agents reconnecting after a restart overflowed 128
# (a dropped SYN is retried by the client after 1, 3, 7 s). The kernel caps it at somaxconn.
LISTEN_BACKLOG = 4096


class NotLeading(InboxUnavailable):
    """Only the leader drains the inbox; the Service spreads pushes over every replica."""


class WakingInbox(SignalInbox):
    """The push endpoints' inbox; a put wakes the leader's intake instead of waiting a tick.
    A follower refuses (503, which Alertmanager and push clients retry, reaching the leader)
    instead of accepting signals nobody would decide on."""

    def __init__(self, capacity: int = 100_000, alerts: FiringAlerts | None = None) -> None:
        super().__init__(capacity, alerts=alerts)
        self.on_put: Callable[[], None] | None = None
        self.accepting: Callable[[], bool] = _always

    def put(self, signals: Sequence[Signal]) -> int:
        if not self.accepting():
            raise NotLeading("this replica does not lead: retry, the leader takes signals")
        taken = super().put(signals)
        if self.on_put is not None:
            self.on_put()
        return taken


def firing_alerts(settings: SignalSettings) -> FiringAlerts:
    """The held Alertmanager alerts; with Alertmanager's URL, re-read when this replica leads."""
    api = None
    if settings.alertmanager_url:
        api = AlertmanagerAPI(settings.alertmanager_url, settings.alertmanager_receiver)
    return FiringAlerts(timedelta(seconds=settings.alert_hold_seconds), api=api)


def _nothing() -> None:
    return None


def _always() -> bool:
    return True


class DatabaseWatch:
    """Whether the database answers the jobs. While it does not, every remediation holds where
    it stands: no step can be read as due or recorded as done, so none starts, and a step cut
    short runs again (idempotently) when it answers. Said once with the reason, and once when
    the database is back, instead of a traceback per job per tick."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.down: str | None = None

    def failed(self, exc: BaseException) -> None:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        reason = f"{exc.__class__.__name__}: {first_line}"[:300]
        with self._lock:
            first, self.down = self.down is None, reason
        if first:
            log.error(
                "database unreachable (%s): every remediation holds where it stands until it "
                "answers again",
                reason,
            )

    def answered(self) -> None:
        with self._lock:
            was, self.down = self.down, None
        if was is not None:
            log.warning("database answers again: resuming the remediations (it was: %s)", was)


def guarded(
    name: str,
    job: Callable[[], None],
    database: DatabaseWatch | None = None,
    *,
    reads_database: bool = False,
) -> Callable[[], None]:
    """A job that logs its failure and tries again at its next run: a down API server or
    database is an expected condition, not a crash. Only a job that always reads the database
    (`reads_database`) tells by succeeding that it is back; others may have had nothing to
    write."""

    def run() -> None:
        try:
            job()
        except (OperationalError, InterfaceError) as exc:
            if database is None:
                log.warning("job %s: database: %s", name, exc)
            else:
                database.failed(exc)
            return
        except RemediatorError as exc:
            log.warning("job %s: %s", name, exc)
        except Exception:
            log.exception("job %s failed", name)
        if database is not None and reads_database:
            database.answered()

    return run


def web_server_config(app: Any) -> uvicorn.Config:
    """uvicorn as the controller runs it: no access log (the request metric counts), and
    connections kept across the agents' heartbeat period."""
    return uvicorn.Config(
        app, log_config=None, access_log=False, timeout_keep_alive=KEEP_ALIVE_SECONDS
    )


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise RemediatorError(f"web.listen must be HOST:PORT, not {listen!r}")
    return host.strip("[]"), int(port)


class Controller:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
        kube: KubeClient | None = None,
        provider: NodePoolProvider | None = None,
        sources: Sequence[Source] | None = None,
        engine: Engine | None = None,
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.registry = registry or CollectorRegistry()
        disable_created_metrics()  # a _created sample per series: twice the scrape, unqueried
        self.identity = settings.leader_election.identity or default_identity()
        self.actor = f"controller {self.identity}"
        self.database = DatabaseWatch()
        self.engine = engine or make_engine(settings.database_url)
        self.repository = Repository(
            make_session_factory(self.engine), settings.cluster_name, self.clock
        )
        api = settings.kube_api
        # Leader election keeps the unguarded client; every job shares one rate limit and may
        # write only while this replica may act.
        self.lease_kube = kube or KubeClient.connect(settings.kubeconfig, api.timeout_seconds)
        self.lease_kube.set_user_agent(f"remediator/{__version__} ({self.identity})")
        self.kube_limiter = TokenBucket(api.qps, api.burst)
        self.kube = self.lease_kube.guarded(limiter=self.kube_limiter, may_write=self.is_leader)
        # Nodes from a watch: the poll and the reconcile read this cache, never a LIST each.
        self.nodes = NodeInformer(self.kube)
        self._interest_for: str | None = None
        self.provider = InstrumentedProvider(
            provider or PoolProviders.from_settings(settings, self.kube),
            ProviderMetrics(self.registry),
        )
        self.notifier = WebhookNotifier.from_settings(settings.notify)
        self.ledger = Ledger(self.repository.session_factory, settings.cluster_name, self.clock)
        self.rma_book = RmaBook(self.repository.session_factory, settings.cluster_name, self.clock)
        self.rma_webhook = (
            RmaWebhook(settings.rma, console_url=settings.web.external_url)
            if settings.rma.webhook_url
            else None
        )
        self.policies = PolicyStore(settings.policies_dir, self.clock)
        self.opt_outs = OptOutBook(
            self.repository.session_factory, settings.cluster_name, self.clock
        )
        self.inbox = WakingInbox(alerts=firing_alerts(settings.signals))
        # Agents' heartbeats: memory first, the database in batches (store/heartbeats.py); the
        # hardware they name goes to the ledger with the same flush (ledger/sightings.py).
        self.hardware = HardwareSightings(self.ledger, self.clock)
        self.heartbeats = HeartbeatBook(
            self.repository,
            self.clock,
            silent_after=timedelta(seconds=settings.agent_silent_after_seconds),
            flush_seconds=settings.agents.heartbeat_flush_seconds,
            budget_per_second=settings.agents.heartbeat_budget_per_second,
            also_flush=self.hardware.flush,
        )
        # The agents' DaemonSet pods, on every replica (each answers the API): liveness in
        # seconds at any fleet size, where heartbeats at the budget's period take 50 minutes.
        self.agent_pods = (
            AgentPods(self.kube, settings.agents.pod_selector, self.clock)
            if settings.agents.pod_selector
            else None
        )
        self.admission = Admission(limits_from(settings))
        self.sources: list[Source] = (
            list(sources) if sources is not None else self._default_sources()
        )
        self.sources.append(self.inbox.alerts)  # firing alerts, re-announced every poll
        self.metrics = ControllerMetrics(self.registry, sources=[s.name for s in self.sources])
        # Outcomes are counted where the store closes a remediation, once each, by the replica
        # that closed it (the leader's engine, any replica's console command).
        self.repository.on_closed = self.metrics.closed

        def provider_kind(pool: str | None) -> str:
            return settings.pool_providers.get(pool or "", settings.provider).type

        self.machine_holds = MachineHolds(
            self.ledger,
            self.kube,
            self.repository,
            self.clock,
            settings=self._machine_hold_settings,
            provider_kind=provider_kind,
            actor=self.actor,
        )
        self.service = RemediationService(
            self.repository,
            self.kube,
            self.provider,
            self.clock,
            actor=self.actor,
            notifier=self.notifier,
            opt_out_label=settings.opt_out_label,
            cluster=settings.cluster_name,
            on_transition=self._on_transition,
            on_illegal=self.metrics.illegal,
            may_act=self.is_leader,
            jobs=JobSettings.load(
                settings.repair.namespace,
                settings.repair.service_account,
                settings.repair.image,
                settings.repair.job_template,
            ),
            repair_poll_seconds=settings.repair.poll_seconds,
            slurm=self._slurm_steps(settings),
            pool_label=settings.pool_label,
            opt_outs=self.opt_outs,
            max_opt_out_hold=self._max_opt_out_hold,
            provider_kind=provider_kind,
            rma_webhook=self.rma_webhook,
            hardware=LedgerHardware(self.ledger),
            machine_hold=self.machine_holds.hold_on,
        )
        self.service.on_wake = self._wake_advance
        self.fence_book = FenceBook(
            self.repository.session_factory, settings.cluster_name, self.clock
        )
        # Known once the cluster's identity is claimed (start): no mark is told ours before.
        self.fence_identity: FenceIdentity | None = None
        slurm_cli = SlurmCli(settings.slurm) if settings.slurm.enabled else None
        self.fences = FenceOwner(
            self.repository,
            self.kube,
            self.fence_book,
            actor=self.actor,
            identity=lambda: self.fence_identity,
            registry=self.registry,
            may_act=self.is_leader,
            on_drift=lambda: self.settings.fences.on_drift,
            machine_hold=self.machine_holds.hold_on,
            machine_known=lambda machine: machine in self.ledger.quarantine_state()[0],
            slurm=self.service.slurm,
            slurm_client=slurm_cli,
            slurm_settings=settings.slurm if slurm_cli is not None else None,
            list_nodes=self.nodes.list_nodes,
        )
        self.service.fences = self.fences
        # Pods from their own watch; nodes from the informer's, so every node event is read
        # once, not twice.
        self.activity = NodeActivity(
            self.kube,
            on_change=self.service.wake_node,
            on_resync=self.service.wake_all,
            watch_nodes=False,
        )
        self.nodes.subscribe(self.service.wake_node, self.service.wake_all)
        self.nodes.subscribe(self._node_changed, _nothing)
        self._drops = RecentDrops()
        self._inventories = InventoryCache(settings.pool_label)
        archive = settings.signal_archive
        self.archive: SignalArchive | None = (
            SignalArchive(
                self.repository.session_factory,
                settings.cluster_name,
                max_run=timedelta(minutes=archive.max_run_minutes),
                floors=archive.floors,
            )
            if archive.enabled
            else None
        )
        self.fleet_breaker = FleetBreakerStore(self.repository.session_factory, self.clock)
        self.intake = Intake(
            self.repository,
            actor=self.actor,
            archive=self.archive,
            pods=pods_from(self.kube),
            fleet=self.fleet_breaker,
            ledger=self.ledger,
        )
        self.inventory: Inventory | None = None
        self._inventory_at = 0.0
        self._leading = threading.Event()
        self._push_loop: WakeLoop | None = None
        self._advance_wanted = threading.Event()
        self._lead_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self._policy_error: object | None = None
        self._recorded_version: tuple[str, str | None] | None = None
        self._shown_version: tuple[str, str | None] | None = None
        self._web: QuietServer | None = None
        self._web_thread: threading.Thread | None = None
        self.web_url: str | None = None
        self.elector: LeaderElector | None = None
        if settings.leader_election.enabled:
            election = settings.leader_election
            self.elector = LeaderElector(
                self.lease_kube,
                namespace=election.namespace,
                name=election.lease_name,
                identity=self.identity,
                lease_duration=election.lease_duration_seconds,
                renew_deadline=election.renew_deadline_seconds,
                retry_period=election.retry_period_seconds,
                on_started_leading=self._start_leading,
                on_stopped_leading=self._stop_leading,
                clock=self.clock,
            )
        self.inbox.on_put = self._wake_push
        self.inbox.accepting = self.is_leader

    def _machine_hold_settings(self) -> MachineHoldSettings:
        active = self.policies.active
        return active.settings.machine_hold if active is not None else MachineHoldSettings()

    def _on_transition(self, seen: TransitionSeen) -> None:
        self.metrics.transition(seen)
        self.machine_holds.on_transition(seen)
        self._fence_failed_validation(seen)

    def _fence_failed_validation(self, seen: TransitionSeen) -> None:
        """A machine that failed its burn-in stays fenced until an operator releases it, even
        after its remediation ends (docs/safety.md I1), or until it passes a later validation
        (a repaired node after its fallback): both recorded as decisions of this store."""
        if seen.action not in ("validate_failed", "validate_done"):
            return
        asker = Asker(self.actor, "controller")
        rid = seen.after.id
        try:
            if seen.action == "validate_failed":
                node = failed_machine(seen.before, seen.detail)
                found = next((n for n in self.nodes.list_nodes() if n.name == node), None)
                machine = {"node_uid": found.uid, "provider_id": found.provider_id} if found else {}
                self.fence_book.record(
                    node,
                    FenceAction.FENCE,
                    reason=f"failed validation in remediation {rid}: {seen.detail.get('reason')}",
                    asker=asker,
                    mark={"failed_validation": "true", "remediation_id": str(rid), **machine},
                )
                return
            newest = {d.node: d for d in self.fence_book.decisions()}
            for passed in validated_nodes(seen.before, seen.detail):
                if passed in newest and newest[passed].mark.get("failed_validation"):
                    self.fence_book.record(
                        passed,
                        FenceAction.RELEASE,
                        reason=f"passed validation in remediation {rid}",
                        asker=asker,
                    )
        except SQLAlchemyError as exc:
            log.warning("a validation of remediation %s not recorded as a fence: %s", rid, exc)

    def _node_changed(self, node: str) -> None:
        """A node whose fence is due changed (an uncordon, a taint removed): look now, not at
        the next interval (docs/safety.md I3)."""
        if self.fences.watches(node):
            wake(self._scheduler, "reconcile")

    def _max_opt_out_hold(self) -> timedelta:
        active = self.policies.active
        return active.settings.max_opt_out_hold if active is not None else DEFAULT_MAX_HOLD

    def _default_sources(self) -> list[Source]:
        sources: list[Source] = [NodeConditionSource(self.nodes)]
        if self.settings.prometheus_url:
            config = PrometheusSourceConfig(
                url=self.settings.prometheus_url,
                timeout_seconds=self.settings.prometheus_timeout_seconds,
                sample_max_age_seconds=self.settings.prometheus_sample_max_age_seconds,
            )
            sources.append(PrometheusSource(config))
        slurm = self.settings.slurm
        if slurm.enabled and slurm.watch_nodes:
            sources.append(SlurmNodeSource(SlurmCli(slurm), slurm, self.kube.list_nodes))
        providers = [self.settings.provider, *self.settings.pool_providers.values()]
        sources.extend(maintenance_sources(providers, self.nodes))
        return sources

    # -- leadership --------------------------------------------------------------------------

    def _slurm_steps(self, settings: Settings) -> SlurmSteps | None:
        if not settings.slurm.enabled:
            return None
        repo, actor = self.repository, self.actor

        def append(remediation_id: int, action: str, detail: Mapping[str, Any]) -> None:
            repo.append_event(remediation_id, action=action, actor=actor, detail=detail)

        return SlurmSteps(SlurmCli(settings.slurm), settings.slurm, self.kube, append)

    def is_leader(self) -> bool:
        """Leading, and (with an election) still inside the renew deadline: a leader that could
        not renew stops acting on its own, before its lease can expire for a standby."""
        if not self._leading.is_set():
            return False
        return self.elector is None or self.elector.may_act()

    def _start_leading(self) -> None:
        with self._lead_lock:
            if self._scheduler is not None:
                return
            self._leading.set()
            self.metrics.is_leader.set(1)
            log.info("leading: starting the jobs", extra={"identity": self.identity})
            interval = self.settings.poll_interval_seconds
            scheduler = build_scheduler(
                [
                    JobSpec("poll", guarded("poll", self.poll, self.database), interval),
                    JobSpec(
                        ADVANCE_JOB,
                        guarded(ADVANCE_JOB, self.advance, self.database, reads_database=True),
                        self.settings.advance_interval_seconds,
                    ),
                    JobSpec(
                        "reconcile",
                        guarded("reconcile", self.reconcile, self.database),
                        RECONCILE_SECONDS,
                    ),
                    JobSpec(
                        "heartbeat",
                        guarded("heartbeat", self.heartbeat, self.database, reads_database=True),
                        HEARTBEAT_SECONDS,
                    ),
                    JobSpec(
                        "rma-webhook",
                        guarded("rma-webhook", self.deliver_rma, self.database),
                        RMA_WEBHOOK_SECONDS,
                    ),
                    JobSpec(
                        "archive-retention",
                        guarded("archive-retention", self.prune_archive),
                        ARCHIVE_RETENTION_SECONDS,
                    ),
                ]
            )
            scheduler.start()
            self._scheduler = scheduler
            self._push_loop = WakeLoop(
                PUSH_LOOP,
                guarded(PUSH_LOOP, self.take_pushed, self.database),
                PUSH_FALLBACK_SECONDS,
            )
            self._push_loop.start()
            self.activity.start()

    def _stop_leading(self, wait: bool = False) -> None:
        """On a lost lease (the elector's thread) do not wait for running jobs: they see
        `is_leader()` false before their next action and stop there."""
        with self._lead_lock:
            self._leading.clear()
            self.metrics.is_leader.set(0)
            scheduler, self._scheduler = self._scheduler, None
            push_loop, self._push_loop = self._push_loop, None
            self.activity.stop()
        if push_loop is not None:
            push_loop.stop(wait=wait)
        if scheduler is not None:
            log.warning(
                "not leading any more: stopping the jobs", extra={"identity": self.identity}
            )
            scheduler.shutdown(wait=wait)

    def _wake_advance(self) -> None:
        self._advance_wanted.set()
        wake(self._scheduler, ADVANCE_JOB)

    def _wake_push(self) -> None:
        loop = self._push_loop
        if loop is not None:
            loop.wake()

    # -- the leader's jobs -------------------------------------------------------------------

    def poll(self) -> None:
        """Poll every source, refresh the node inventory, and decide on what came in."""
        self._narrow_sources()
        now = self.clock.now()
        signals: list[Signal] = []
        for source in self.sources:
            result = source.poll(now)
            self._record_health(result)
            self.metrics.received(result.health.name, result.signals)
            signals.extend(result.signals)
        listed = (
            s.all_nodes
            for s in self.sources
            if isinstance(s, NodeConditionSource) and s.all_nodes is not None
        )
        self.refresh_inventory(next(listed, None))
        self._decide(signals)

    def _narrow_sources(self) -> None:
        """Tell the sources what the active policy set could act on, once per new set."""
        active = self.policies.active
        if active is None or active.content_hash == self._interest_for:
            return
        spec = active.settings.startup_taint
        for source in self.sources:
            if isinstance(source, NodeConditionSource):
                source.startup_taint = Taint.parse(spec).key if spec else None
        interest = interest_of(active.policies)
        for source in self.sources:
            narrow = getattr(source, "set_interest", None)
            if callable(narrow):
                narrow(interest)
        self._interest_for = active.content_hash

    def take_pushed(self) -> None:
        """Drain the push inbox and decide on what was in it (the push loop runs this when a
        put wakes it; a put landing meanwhile wakes it again)."""
        if not self.is_leader():
            return
        result = self.inbox.poll(self.clock.now())
        self.metrics.source_up.labels(result.health.name).set(1)
        self.metrics.received(result.health.name, result.signals)
        known = self.inventory.pools if self.inventory is not None else {}
        if any(s.node not in known for s in result.signals):
            # A node that joined a moment ago may not have reached the watch cache yet:
            # ask the API server itself before calling it unknown.
            self.refresh_inventory(fresh=True)
        if result.signals:
            self._decide(list(result.signals))

    def refresh_inventory(
        self, nodes: Sequence[Node] | None = None, *, fresh: bool = False
    ) -> Inventory:
        """From `nodes` when this poll already read them all, else from the node cache (or,
        `fresh`, from a LIST: for a signal naming a node the cache does not know)."""
        if fresh and nodes is None:  # new objects: nothing for the cache to reuse
            inventory = Inventory.from_nodes(self.kube.list_nodes(), self.settings.pool_label)
        else:
            inventory = self._inventories.build(self.nodes.list_nodes() if nodes is None else nodes)
        self.inventory = inventory
        self._inventory_at = self.clock.monotonic()
        return inventory

    def _decide(self, signals: Sequence[Signal]) -> None:
        if not self.is_leader():
            return
        inventory = self.inventory or self.refresh_inventory()
        result = self.intake.process(signals, inventory, self.policies.active, self.clock.now())
        self._after_intake(result)
        while result.waiting and self.is_leader():
            # A node's events after its deciding one, decided now that what it opened has
            # moved (policy/moments.py); each intake takes at least one moment of each node.
            result = self.intake.process((), inventory, self.policies.active, self.clock.now())
            self._after_intake(result)

    def _after_intake(self, result: IntakeResult) -> None:
        """Page on a trip, tell owners once about each newly queued remediation, and start
        the admitted ones at once. The breaker's queue gets its one page, not a note per node
        of the storm."""
        for record in result.queued:
            if record.queue_cause != HoldCause.BREAKER.value:
                self._notify_queued(record)
        if result.breaker_tripped and self.notifier is not None:
            self.notifier.send(
                Notification(
                    kind=NotificationKind.BREAKER_TRIPPED,
                    remediation_id="",
                    node="",
                    summary=result.breaker_tripped,
                    cluster=self.settings.cluster_name,
                )
            )
        news = self._drops.news(result.dropped, self.clock.now())
        if news:
            log.warning("signals dropped before evaluation: %s", summary(news))
        self.metrics.dropped(news)
        for source, count in result.folded.items():
            self.metrics.dropped_count(source, "duplicate", count)
        self.metrics.disposed(result.dispositions)
        self.metrics.opened(result.created)
        for record in result.created:
            self.service.advance(record.id)
        for record in result.queued:
            self.service.advance(record.id)

    def _notify_queued(self, record: RemediationRecord) -> None:
        if self.notifier is None:
            return
        self.notifier.send(
            Notification(
                kind=NotificationKind.QUEUED,
                remediation_id=str(record.id),
                node=record.node,
                summary=record.hold_reason or record.reason,
                policy=record.policy,
                cluster=self.settings.cluster_name,
                fields={"State": record.state.value, "Cause": record.reason},
            )
        )

    def admit_queued(self) -> None:
        """Offer queued remediations to the budgets again: one is admitted the moment its hold
        lifts, with no new signal. The inventory is listed afresh first, so a node replaced a
        moment ago no longer counts as out of service."""
        if not self.is_leader() or not self.intake.has_queued():
            return
        stale = self.clock.monotonic() - self._inventory_at > INVENTORY_MAX_AGE_SECONDS
        inventory = self.refresh_inventory() if stale or self.inventory is None else self.inventory
        self._after_intake(
            self.intake.admit_queued(inventory, self.policies.active, self.clock.now())
        )

    def _record_health(self, result: SourceResult) -> None:
        health = result.health
        self.metrics.source_up.labels(health.name).set(1 if health.up else 0)
        for key, reason in (
            ("skipped_series", "invalid_series"),
            ("unknown_instances", DropReason.UNKNOWN_INSTANCE.value),
        ):
            count = health.detail.get(key, "0")
            self.metrics.dropped_count(health.name, reason, int(count) if count.isdigit() else 0)
        if not health.up:
            log.warning("source down: %s", health.error, extra={"source": health.name})
        self.repository.record_source_health(health.name, up=health.up, error=health.error)

    def advance(self) -> None:
        """Offer queued remediations to the budgets, then tick the open ones whose wait is
        over, unless a human paused automation: then no step starts (a drain round already sent
        completes; the next one waits for the resume). A wake that lands while this runs cannot
        start it again (one instance at a time), so it looks again itself; then the next run is
        set for the earliest wait's end. With nothing open (the idle fleet's case) one index
        read is the whole tick."""
        while self.is_leader():
            self._advance_wanted.clear()
            if not self.repository.has_open():
                break
            self.admit_queued()
            if self.repository.controller_status().paused:
                return
            self.service.advance_due()
            if not self._advance_wanted.is_set():
                break
        due = self.service.next_due_in()
        if due is not None and due < self.settings.advance_interval_seconds:
            wake_at(self._scheduler, ADVANCE_JOB, self.clock.now() + timedelta(seconds=due))

    def reconcile(self) -> None:
        nodes = self.nodes.list_nodes()
        if self.is_leader():
            end_all_gone(self.repository, nodes, self.settings.pool_label, self.actor)
            # Expiries no held remediation noticed are audited too.
            self.opt_outs.note_expired(self.opt_outs.expired_unnoted(), self.actor)
            # A quarantined machine back under a new name is fenced before it takes work.
            self.machine_holds.fence_arrivals(nodes)
        self.fences.reconcile(nodes)

    def heartbeat(self) -> None:
        self.repository.record_leader(self.identity)
        if self.is_leader() and self.inventory is not None:
            self.intake.report_fleet_size(self.inventory, self.policies.active, self.clock.now())

    def prune_archive(self) -> None:
        if self.archive is not None:
            days = self.settings.signal_archive.retention_days
            self.archive.prune(self.clock.now() - timedelta(days=days))

    # -- every replica -----------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Keep the policy view current; failures are logged, never fatal. The gauges read from
        the store are set at scrape time (`scrape_refresh`), not here: an idle replica would
        otherwise query the store every tick for numbers nobody reads."""
        try:
            self.reload_policies()
        except (RemediatorError, SQLAlchemyError) as exc:
            log.warning("housekeeping: %s: %s", type(exc).__name__, exc)
        try:
            self.heartbeats.tick()
        except SQLAlchemyError as exc:
            log.warning("heartbeats: batched write failed, rows stay pending: %s", exc)

    def scrape_refresh(self) -> None:
        """Set the gauges from the store just before /metrics answers, one scrape at a time; a
        store that cannot answer leaves the last values and is logged, the scrape still
        succeeds (its other series are still true)."""
        with self._refresh_lock:
            try:
                self.refresh_metrics()
            except (RemediatorError, SQLAlchemyError) as exc:
                log.warning("metrics refresh: %s: %s", type(exc).__name__, exc)

    def reload_policies(self) -> None:
        self.policies.reload_if_changed()
        active = self.policies.active
        error = self.policies.last_error
        if error is not None and error is not self._policy_error:
            self._policy_error = error
            self.metrics.policy_load_errors.inc()
            log.error("policy set refused, keeping the last good one: %s", error)
            if self.is_leader():
                self._record_refused(str(error))
        if active is None:
            return
        # The commit too: a new commit with the same files is what new remediations record.
        version = (active.content_hash, active.commit)
        if version != self._shown_version:
            self.metrics.policy_set(active.commit, active.content_hash)
            self._shown_version = version
            unfenced = startup_taint_warning(active.policies, active.settings)
            if unfenced:
                log.warning("%s (see docs/validation.md)", unfenced)
        if version != self._recorded_version and self.is_leader():
            self.repository.record_policy_set(
                content_hash=active.content_hash,
                commit=active.commit,
                dirty=active.dirty,
                files=active.files,
            )
            self._recorded_version = version
            log.info("policy set active: %s (%s)", active.content_hash[:12], active.commit)

    def _record_refused(self, error: str) -> None:
        """Record the refused set with its commit, so the console names the bad commit."""
        directory = self.settings.policies_dir
        try:
            files = {p.name: p.read_text(encoding="utf-8") for p in policy_files(directory)}
        except (OSError, UnicodeDecodeError):
            files = {}
        commit, dirty = git_revision(directory) if files else (None, True)
        self.repository.record_policy_set(
            content_hash=content_hash(files),
            commit=commit,
            dirty=dirty,
            files=files,
            status="refused",
            error=error,
        )

    def refresh_metrics(self) -> None:
        failed = self.repository.list(
            RemediationFilter(states=frozenset({State.FAILED})), limit=500
        )
        rows = [*self.repository.list_open(), *failed.rows]
        fencing = [r for r in (self.repository.get(row.id) for row in rows) if r is not None]
        now = self.clock.now()
        judge = liveness_judge(
            self.agent_pods,
            now,
            silent_after=self.heartbeats.silent_after,
            not_ready_after=timedelta(seconds=self.settings.agents.pod_not_ready_seconds),
        )
        self.metrics.agents(self.heartbeats.statuses(), judge)
        self.metrics.refresh(fencing, self.repository.controller_status(), now)
        self.metrics.fleet_breaker_tripped.set(1 if self.fleet_breaker.status().tripped else 0)

    # -- the web console ---------------------------------------------------------------------

    def cluster_problem(self) -> str | None:
        try:
            self.kube.list_nodes(label_selector=PROBE_SELECTOR)
        except RemediatorError as exc:
            return str(exc)
        return None

    def read_node(self, name: str) -> Node | None:
        """The node as the cluster has it now, for the console's node page."""
        try:
            return self.kube.get_node(name)
        except NotFoundError:
            return None

    def web_deps(self) -> WebDeps:
        """What the console needs from this controller."""
        return WebDeps(
            settings=self.settings,
            repository=self.repository,
            policies=self.policies,
            inbox=self.inbox,
            registry=self.registry,
            is_leader=self.is_leader,
            check_cluster=self.cluster_problem,
            clock=self.clock,
            read_node=self.read_node,
            before_scrape=self.scrape_refresh,
            scrape_extra=self.metrics.agents_exposition,
            heartbeats=self.heartbeats,
            hardware=self.hardware,
            admission=self.admission,
            node_known=self.nodes.knows,
            node_gpus=partial(node_gpus, self.nodes.gpus_of, self.read_node),
            list_nodes=self.nodes.list_nodes,
            list_gang_pods=lambda: self.kube.list_pods_everywhere(GANG_LABEL),
            machine_hold=self.machine_holds.hold_on,
            fences=self.fences,
            fences_changed=lambda: wake(self._scheduler, "reconcile"),
            agent_pods=self.agent_pods,
        )

    def start_web(self) -> str:
        host, port = split_listen(self.settings.web.listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        server = QuietServer(web_server_config(create_app(self.web_deps())))
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="web", daemon=True
        )
        thread.start()
        self._web, self._web_thread = server, thread
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if family == socket.AF_INET6 else bound_host
        self.web_url = f"http://{shown}:{bound_port}"
        return self.web_url

    # -- lifecycle ---------------------------------------------------------------------------

    def claim_identity(self) -> None:
        """Record (or confirm) that this cluster owns its name in the database, before anything
        is written under it: raises IdentityConflict for a name another cluster owns."""
        uid = self.lease_kube.namespace_uid("kube-system")
        ClusterRegistry(self.repository.session_factory, self.clock).claim(
            self.settings.cluster_name, uid, by=self.actor
        )
        self.fence_identity = FenceIdentity(self.fence_book.store_id(), uid)

    def start(self, *, serve_web: bool = True) -> None:
        self.claim_identity()
        self.policies.reload_if_changed()
        self.nodes.start()
        if self.agent_pods is not None:
            self.agent_pods.start()
        if serve_web:
            self.start_web()
        if self.elector is not None:
            self.elector.start()
        else:
            self._start_leading()
        self.housekeeping()

    def deliver_rma(self) -> None:
        """RMA cases whose webhook delivery is due (a failed one is retried with backoff)."""
        if self.rma_webhook is not None:
            self.rma_webhook.deliver_due(self.rma_book, note=self._rma_failure_note)

    def _rma_failure_note(self, case: RmaCase, error: str, retry_in: timedelta) -> None:
        if case.remediation_id is None:
            return
        self.repository.append_event(
            case.remediation_id,
            action="rma_webhook_failed",
            actor=self.actor,
            detail={
                "case": case.id,
                "error": error,
                "attempt": case.webhook_attempts,
                "retry_in_seconds": retry_in.total_seconds(),
            },
        )

    def stop(self) -> None:
        # Our jobs end before the lease is handed over, so two replicas never act at once.
        self._stop_leading(wait=True)
        try:
            self.heartbeats.flush()
        except SQLAlchemyError as exc:
            log.warning("heartbeats: pending rows not written at shutdown: %s", exc)
        if self.archive is not None:
            try:
                self.archive.flush()
            except SQLAlchemyError as exc:
                log.warning("signal archive: open runs left for the next leader: %s", exc)
        if self.elector is not None:
            self.elector.stop(release=True)
        if self._web is not None:
            self._web.request_exit()
        if self._web_thread is not None:
            self._web_thread.join(timeout=10)
        for source in self.sources:
            close = getattr(source, "close", None)
            if callable(close):
                close()
        if self.rma_webhook is not None:
            self.rma_webhook.close()
        self.nodes.stop()
        if self.agent_pods is not None:
            self.agent_pods.stop()
        self.kube.close()
        self.engine.dispose()

    def run(self, stop: threading.Event, ready_file: Path | None = None) -> None:
        """Serve until `stop` is set; the ready file (JSON: web_url, identity, pid) is written
        once the console listens."""
        self.start()
        try:
            if ready_file is not None:
                body = {"web_url": self.web_url, "identity": self.identity, "pid": os.getpid()}
                temp = ready_file.with_suffix(".tmp")
                temp.write_text(json.dumps(body))
                temp.replace(ready_file)
            while not stop.wait(HOUSEKEEPING_SECONDS):
                self.housekeeping()
        finally:
            self.stop()
