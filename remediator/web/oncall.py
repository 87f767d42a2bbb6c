"""Runs an on-call command for the API and the pages alike: the command, its audit row, its
metric and log line, and the mapping of refusals to HTTP answers (404 unknown, 409 not allowed
now). Every command asked is audited, done or refused."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Request

from remediator.errors import NotFoundError
from remediator.remediation import commands
from remediator.store.audit import AuditLog, NewAudit
from remediator.store.records import ControllerStatus, RemediationRecord
from remediator.web.access import Reader, audit_log, require_operator, web_deps
from remediator.web.auth import Principal
from remediator.web.deps import WebDeps
from remediator.web.metrics import ConsoleMetrics
from remediator.web.problems import WebError

log = logging.getLogger("remediator.audit")


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


@dataclass(frozen=True)
class Asked:
    """Who asked for a command and from where, with what the command needs to run."""

    deps: WebDeps
    metrics: ConsoleMetrics
    audit: AuditLog
    principal: Principal
    source: str


async def asked(request: Request, principal: Reader) -> Asked:
    """The asker of a command, once they may run it; a reader refused here (a read-only token,
    a missing CSRF token) is audited like any other refusal."""
    return await _asked(request, principal, *_command_of(request))


def asker_for(command: str) -> Callable[[Request, Principal], Awaitable[Asked]]:
    """`asked` for a route whose command is not one of the remediation or controller commands
    (its path does not name it): its refusals are audited under `command`."""

    async def asked_for(request: Request, principal: Reader) -> Asked:
        return await _asked(request, principal, command, None)

    return asked_for


async def _asked(
    request: Request, principal: Principal, command: str | None, remediation_id: int | None
) -> Asked:
    ask = Asked(
        web_deps(request),
        request.app.state.metrics,
        audit_log(request),
        principal,
        client_address(request),
    )
    try:
        await require_operator(request, principal)
    except WebError as exc:
        if command is not None:
            reason = await _reason_of(request)
            record_command(ask, command, "refused", reason, remediation_id, exc.reason)
        raise
    return ask


def _command_of(request: Request) -> tuple[str | None, int | None]:
    """The command a request asks for: the page routes name it in a path parameter, the API
    routes end with it."""
    params = request.path_params
    name = params.get("command") or request.url.path.rstrip("/").rsplit("/", 1)[-1]
    if name not in commands.COMMANDS and name not in commands.CONTROLLER_COMMANDS:
        return None, None
    raw = params.get("remediation_id")
    try:
        return name, int(raw) if raw is not None else None
    except ValueError:
        return name, None


async def _reason_of(request: Request) -> str | None:
    """The reason given with a refused command, from a JSON body or a form, if readable."""
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            body = json.loads(await request.body())
        except ValueError:
            return None
        reason = body.get("reason") if isinstance(body, dict) else None
    else:
        reason = (await request.form()).get("reason")
    if not isinstance(reason, str) or not reason.strip():
        return None
    return reason.strip()[:500]


Asker = Annotated[Asked, Depends(asked)]


def record_command(
    ask: Asked,
    command: str,
    outcome: str,
    reason: str | None,
    remediation_id: int | None = None,
    detail: str | None = None,
    target: str | None = None,
) -> None:
    """Count, audit and log one command; every command a person asks for goes through here."""
    ask.metrics.commands.labels(command, outcome).inc()
    ask.audit.append(
        NewAudit(
            actor=ask.principal.actor,
            token_id=ask.principal.fingerprint,
            source=ask.source,
            command=command,
            outcome=outcome,
            remediation_id=remediation_id,
            reason=reason,
            detail=detail,
        )
    )
    if target is None:
        target = f"remediation {remediation_id}" if remediation_id is not None else "controller"
    log.info(
        "%s %s by %s from %s: %s%s",
        command,
        target,
        ask.principal.actor,
        ask.source,
        outcome,
        f" ({detail})" if detail else "",
        extra={
            "command": command,
            "remediation_id": remediation_id,
            "actor": ask.principal.actor,
            "token_id": ask.principal.fingerprint,
            "source": ask.source,
            "outcome": outcome,
            "reason": reason,
        },
    )


def run_command(
    ask: Asked,
    command: str,
    remediation_id: int,
    reason: str | None,
    cooldown: timedelta | None = None,
) -> RemediationRecord:
    try:
        record = commands.run(
            ask.deps.repository,
            command,
            remediation_id,
            actor=ask.principal.actor,
            reason=reason,
            cooldown=cooldown,
            machine_hold=ask.deps.machine_hold,
            node_known=ask.deps.node_known,
        )
    except NotFoundError as exc:
        record_command(ask, command, "not_found", reason, remediation_id, str(exc))
        raise WebError(404, str(exc)) from exc
    except commands.CommandRefused as exc:
        record_command(ask, command, "refused", reason, remediation_id, str(exc))
        raise WebError(409, str(exc)) from exc
    done = f"now {record.state.value}"
    if cooldown is not None:
        done += f", hold off {cooldown}"
    record_command(ask, command, "done", reason, remediation_id, done)
    return record


def run_controller_command(
    ask: Asked, command: str, reason: str, drop_queued: bool = False
) -> ControllerStatus:
    options = {"drop_queued": True} if drop_queued else {}
    if options and command != "reset-breaker":
        raise WebError(422, "only reset-breaker can drop the queued remediations")
    try:
        status = commands.CONTROLLER_COMMANDS[command](
            ask.deps.repository, actor=ask.principal.actor, reason=reason, **options
        )
    except commands.CommandRefused as exc:
        record_command(ask, command, "refused", reason, detail=str(exc))
        raise WebError(409, str(exc)) from exc
    record_command(
        ask, command, "done", reason, detail="queued remediations dropped" if drop_queued else None
    )
    return status
