"""Runs an on-call command for the API and the pages alike: the command, its metric, and the
mapping of refusals to HTTP answers (404 unknown, 409 not allowed now)."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry, Counter

from remediator.errors import NotFoundError
from remediator.remediation import commands
from remediator.store.records import ControllerStatus, RemediationRecord
from remediator.web.deps import WebDeps
from remediator.web.problems import WebError


class ConsoleMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.commands = Counter(
            "remediator_console_commands",
            "On-call commands received through the console or API, by outcome.",
            ["command", "outcome"],
            registry=registry,
        )


def run_command(
    deps: WebDeps,
    metrics: ConsoleMetrics,
    command: str,
    remediation_id: int,
    actor: str,
    reason: str | None,
    cooldown: timedelta | None = None,
) -> RemediationRecord:
    try:
        record = commands.run(
            deps.repository, command, remediation_id, actor=actor, reason=reason, cooldown=cooldown
        )
    except NotFoundError as exc:
        metrics.commands.labels(command, "not_found").inc()
        raise WebError(404, str(exc)) from exc
    except commands.CommandRefused as exc:
        metrics.commands.labels(command, "refused").inc()
        raise WebError(409, str(exc)) from exc
    metrics.commands.labels(command, "done").inc()
    return record


def run_controller_command(
    deps: WebDeps,
    metrics: ConsoleMetrics,
    command: str,
    actor: str,
    reason: str,
    drop_queued: bool = False,
) -> ControllerStatus:
    options = {"drop_queued": True} if drop_queued else {}
    if options and command != "reset-breaker":
        raise WebError(422, "only reset-breaker can drop the queued remediations")
    try:
        status = commands.CONTROLLER_COMMANDS[command](
            deps.repository, actor=actor, reason=reason, **options
        )
    except commands.CommandRefused as exc:
        metrics.commands.labels(command, "refused").inc()
        raise WebError(409, str(exc)) from exc
    metrics.commands.labels(command, "done").inc()
    return status
