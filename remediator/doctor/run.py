"""The checks in the order a person fixes them: the cluster first, then what it reads, then
what it acts through."""

from __future__ import annotations

import logging
import threading

from remediator.doctor import cluster, fences, systems, telemetry
from remediator.doctor.context import DoctorContext
from remediator.doctor.report import Report
from remediator.doctor.runner import DEFAULT_TIMEOUT, Check, run_checks
from remediator.settings import Settings

log = logging.getLogger(__name__)


def doctor(settings: Settings, timeout: float = DEFAULT_TIMEOUT) -> Report:
    ctx = DoctorContext(settings, timeout)
    api = str(settings.kubeconfig or "the in-cluster API server")
    checks = [
        Check(
            "kubernetes",
            f"GET /version and a SelfSubjectAccessReview per verb at {api}",
            lambda: cluster.kubernetes(ctx),
        ),
        Check("nodes", f"list nodes at {api}", lambda: cluster.nodes(ctx)),
        Check(
            "policies",
            f"load {settings.policies_dir} and list nodes",
            lambda: cluster.policies(ctx),
        ),
        Check(
            "prometheus",
            f"instant queries at {settings.prometheus_url}",
            lambda: telemetry.prometheus(ctx),
        ),
        Check(
            "alertmanager",
            f"GET {settings.signals.alertmanager_url}/api/v2/status",
            lambda: telemetry.alertmanager(ctx),
        ),
        Check(
            "provider",
            f"a read-only call per pool to the {settings.provider.type} provider",
            lambda: systems.provider(ctx),
        ),
        Check("slurm", "scontrol ping and sinfo --json", lambda: systems.slurm(ctx)),
        Check(
            "database",
            "connect, read the schema revision and the clock",
            lambda: systems.database(ctx),
        ),
        Check("agents", "read the agents' heartbeats", lambda: systems.agents(ctx)),
        Check(
            "fences",
            "list nodes and read the store: fences of another history",
            lambda: fences.fences(ctx),
        ),
    ]
    try:
        return run_checks(checks, timeout)
    finally:
        ctx.close()


def warn_at_start(settings: Settings, timeout: float = DEFAULT_TIMEOUT) -> threading.Thread:
    """`remediator run`'s look at its surroundings: every problem a warning in the log, beside
    the start-up rather than in its way (the controller starts whatever the doctor finds)."""

    def check() -> None:
        report = doctor(settings, timeout)
        for f in report.problems():
            log.warning(
                "doctor: %s %s: %s: %s (fix: %s)", f.status, f.area, f.check, f.found, f.fix
            )
        log.info("doctor: %s (%d checks)", report.status, len(report.findings))

    thread = threading.Thread(target=check, name="doctor", daemon=True)
    thread.start()
    return thread
