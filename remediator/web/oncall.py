"""Runs an on-call command for the API and the pages alike: the command, its audit row, its
metric and log line, and the mapping of refusals to HTTP answers (404 unknown, 409 not allowed
now). Every command asked is audited, done or refused: a command route takes `Asker` (or an
`asker_for` its command), which notes the command on the request before any check, and the
console's error handlers write every refusal through `audit_refusal`, so a new command cannot
forget its refused rows."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from remediator.errors import NotFoundError
from remediator.remediation import commands
from remediator.store.audit import AuditLog, NewAudit
from remediator.store.records import ControllerStatus, RemediationRecord
from remediator.web.access import (
    audit_log,
    require_operator,
    require_principal,
    require_reader,
    web_deps,
)
from remediator.web.auth import Principal
from remediator.web.deps import WebDeps
from remediator.web.metrics import ConsoleMetrics
from remediator.web.problems import WebError

log = logging.getLogger("remediator.audit")
COMMAND_MARK = "audited_command"
MAX_ID = 2**63 - 1
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Only who asks, checked first (a 401 names no one); the role and the cluster scope are
# checked after the command is noted, so their refusals are audited.
Known = Annotated[Principal, Depends(require_principal)]


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class CommandAudit:
    """The audit logs a command is written to (its cluster's; the fleet breaker's reset, every
    cluster's), remembering whether anything was written, so the refusal handler adds a row
    only for a refusal the route did not record itself."""

    def __init__(self, logs: Sequence[AuditLog]) -> None:
        self.logs = tuple(logs)
        self.written = False

    def append(self, entry: NewAudit) -> None:
        for audit in self.logs:
            audit.append(entry)
        self.written = True


@dataclass(frozen=True)
class Asked:
    """Who asked for which command and from where, with what the command needs to run.
    `command` None: a path that names no command (`/remediations/1/bogus`), refused as such."""

    deps: WebDeps
    metrics: ConsoleMetrics
    audit: CommandAudit
    principal: Principal
    source: str
    command: str | None = None
    remediation_id: int | None = None


AuditsOf = Callable[[Request], Sequence[AuditLog]]


def _own_audit(request: Request) -> Sequence[AuditLog]:
    return (audit_log(request),)


async def asked(request: Request, principal: Known) -> Asked:
    """The asker of a command named by its path (the remediation and controller commands),
    once they may run it."""
    return await _asked(request, principal, *_command_of(request), _own_audit)


def asker_for(
    command: str, audits_of: AuditsOf = _own_audit
) -> Callable[[Request, Principal], Awaitable[Asked]]:
    """`asked` for a route whose path does not name its command: refusals and the done row
    are audited under `command`, in the logs `audits_of` names (default: the request's
    cluster's)."""

    async def asked_for(request: Request, principal: Known) -> Asked:
        return await _asked(request, principal, command, None, audits_of)

    setattr(asked_for, COMMAND_MARK, command)
    return asked_for


setattr(asked, COMMAND_MARK, "from the path")


def declares_command(dependency: object, path: str) -> bool:
    """Whether a route dependency names the route's command, as every command route's must:
    an `asker_for`, or `asked` on a path that names a remediation or controller command."""
    if getattr(dependency, COMMAND_MARK, None) != "from the path":
        return hasattr(dependency, COMMAND_MARK)
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return last == "{command}" or last in commands.COMMANDS or last in commands.CONTROLLER_COMMANDS


async def _asked(
    request: Request,
    principal: Principal,
    command: str | None,
    remediation_id: int | None,
    audits_of: AuditsOf,
) -> Asked:
    """Noted on the request before any check runs: whichever check refuses it (a read-only
    token, a token scoped to another cluster, a missing CSRF token, the route's own 404, 409
    or 422), `audit_refusal` writes the row."""
    logs = await run_in_threadpool(audits_of, request)
    ask = Asked(
        web_deps(request),
        request.app.state.metrics,
        CommandAudit(logs),
        principal,
        client_address(request),
        command,
        remediation_id,
    )
    request.state.asked = ask
    await require_operator(request, await require_reader(request, principal))
    return ask


async def audit_refusal(request: Request, status: int, reason: str) -> None:
    """The one place a refused command becomes an audit row (called by the console's error
    handlers): who, what, its remediation, the reason they gave, and why it was refused. A
    request refused before anyone was known (401) has no one to name and writes nothing: it
    is counted and logged as an authentication failure."""
    ask: Asked | None = getattr(request.state, "asked", None)
    if ask is None or ask.command is None or ask.audit.written:
        return
    given = await _reason_of(request)
    outcome = "not_found" if status == 404 else "refused"
    await run_in_threadpool(
        record_command,
        ask,
        ask.command,
        outcome,
        printable(given) if given is not None else None,
        ask.remediation_id,
        printable(reason),
    )


def printable(text: str) -> str:
    """A refused request's own words as the log can hold them: a malformed one may carry
    control characters (PostgreSQL refuses NUL in text)."""
    return _CONTROL.sub(" ", text)


def _command_of(request: Request) -> tuple[str | None, int | None]:
    """The command a request asks for: the page routes name it in a path parameter, the API
    routes end with it."""
    params = request.path_params
    name = params.get("command") or request.url.path.rstrip("/").rsplit("/", 1)[-1]
    if name not in commands.COMMANDS and name not in commands.CONTROLLER_COMMANDS:
        return None, None
    raw = params.get("remediation_id")
    try:
        number = int(raw) if raw is not None else None
    except ValueError:
        return name, None
    # Only an id a remediation could have (a malformed one is refused, and still audited).
    return name, number if number is not None and 0 < number <= MAX_ID else None


async def _reason_of(request: Request) -> str | None:
    """The reason given with a refused command, from a JSON body, a form or the query (a
    DELETE's), if readable."""
    if "reason" in request.query_params:
        reason: object = request.query_params["reason"]
    elif request.headers.get("content-type", "").startswith("application/json"):
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
        raise WebError(404, str(exc)) from exc
    except commands.CommandRefused as exc:
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
        raise WebError(409, str(exc)) from exc
    record_command(
        ask, command, "done", reason, detail="queued remediations dropped" if drop_queued else None
    )
    return status
