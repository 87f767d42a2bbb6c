"""The AWS endpoint the controller talks to: moto behind a proxy that can answer as AWS does when
it throttles, on the wire (query-protocol XML errors that botocore parses into ClientError), and
that serves the groups' scaling activities moto does not keep (`activities.py`).

Faults are set with `POST /_sim/faults`:
- `{"type": "throttle", "count": N, "action": "TerminateInstanceInAutoScalingGroup"}`: the next N
  matching calls (any action when omitted) answer 400 `Throttling` (EC2: `RequestLimitExceeded`);
- `{"type": "never_ready", "count": N}`: the next N launched instances register a Node that never
  turns Ready;
- `{"type": "insufficient_capacity", "count": N, "retry_seconds": S}`: a terminated instance's
  replacement is not launched; the group's next N launch attempts (one per S seconds, default 2)
  fail with `InsufficientInstanceCapacity` Failed activities, then it launches. `count: 0` ends it;
- `{"type": "spare_capacity", "pool": P, "spare": N}`: the group's MaxSize becomes desired + N.

`RebootInstances` that moto accepted also reboots each instance's Node (NotReady for the reboot
time, back with a new boot id): moto only keeps the instance `running`.

Scheduled events (`events.py`): `DescribeInstanceStatus` answers with each instance's
`eventsSet` and pages as EC2 does. `POST /_sim/events` `{"node"|"instance_id", "code",
"not_before", "not_after"?, "not_before_deadline"?, "description"?}` creates one (201, its wire
fields); `POST /_sim/events/{id}/reschedule` `{"not_before"}` moves it; `.../complete` and
`.../cancel` end it; `GET /_sim/events` lists them.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from remediator.sim.cloud.aws.activities import describe_response
from remediator.sim.cloud.aws.events import (
    EventProblem,
    EventRequest,
    RescheduleRequest,
    ScheduledEvents,
    page_size,
    with_events,
)
from remediator.sim.cloud.aws.fleet import SimAwsFleet

SERVICE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/(?P<service>[^/]+)/aws4_request")
HOP_HEADERS = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "content-encoding"}
)


class FaultRequest(BaseModel):
    type: str
    count: int = Field(default=1, ge=0)
    action: str | None = None
    pool: str | None = None
    spare: int | None = Field(default=None, ge=0)
    retry_seconds: float | None = Field(default=None, gt=0, le=3600)


@dataclass
class Throttle:
    count: int = 0
    action: str | None = None


def error_xml(service: str, code: str, message: str) -> str:
    request_id = str(uuid.uuid4())
    if service == "ec2":
        return (
            "<?xml version='1.0' encoding='UTF-8'?><Response><Errors><Error>"
            f"<Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
    return (
        '<ErrorResponse xmlns="https://autoscaling.amazonaws.com/doc/2011-01-01/">'
        f"<Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )


def reboot_targets(body: str) -> list[str]:
    """The instance ids of a query-protocol `RebootInstances` call (`InstanceId.N`)."""
    params = parse_qs(body)
    if (params.get("Action") or [""])[0] != "RebootInstances":
        return []
    found = sorted(params.items())
    return [v for key, values in found if key.startswith("InstanceId.") for v in values]


def build_aws_app(
    fleet: SimAwsFleet,
    moto_url: str,
    reboot: Callable[[str], None] | None = None,
    events: ScheduledEvents | None = None,
) -> Starlette:
    scheduled = events if events is not None else ScheduledEvents()
    throttle = Throttle()
    lock = threading.Lock()
    client = httpx.AsyncClient(base_url=moto_url, timeout=30.0)

    def throttled(action: str) -> bool:
        with lock:
            if throttle.count > 0 and throttle.action in (None, action):
                throttle.count -= 1
                return True
        return False

    async def faults(request: Request) -> Response:
        try:
            fault = FaultRequest.model_validate(await request.json())
        except (ValueError, ValidationError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if fault.type == "throttle":
            with lock:
                throttle.count, throttle.action = fault.count, fault.action
        elif fault.type == "never_ready":
            fleet.faults.never_ready = fault.count
        elif fault.type == "insufficient_capacity":
            fleet.faults.insufficient_capacity = fault.count
            if fault.retry_seconds is not None:
                fleet.faults.retry_seconds = fault.retry_seconds
        elif fault.type == "spare_capacity" and fault.pool and fault.spare is not None:
            try:
                fleet.set_spare(fault.pool, fault.spare)
            except KeyError:
                return JSONResponse({"error": f"no group {fault.pool}"}, status_code=404)
        else:
            return JSONResponse({"error": f"unknown fault {fault.type!r}"}, status_code=400)
        return JSONResponse({"ok": True, "fault": fault.model_dump(exclude_none=True)})

    async def forward(request: Request) -> Response:
        body = await request.body()
        params = parse_qs(body.decode(errors="replace"))
        action = (params.get("Action") or [""])[0]
        match = SERVICE.search(request.headers.get("authorization", ""))
        service = match["service"] if match else ""
        if throttled(action):
            code = "RequestLimitExceeded" if service == "ec2" else "Throttling"
            return Response(
                error_xml(service, code, "Rate exceeded"),
                status_code=400 if service != "ec2" else 503,
                media_type="text/xml",
            )
        if action == "DescribeInstanceStatus":
            return await describe_instance_status(request, params)
        if action == "DescribeScalingActivities":
            named = params.get("AutoScalingGroupName")
            return Response(
                describe_response(fleet.activities.of(named[0] if named else None)),
                media_type="text/xml",
            )
        if (
            action == "TerminateInstanceInAutoScalingGroup"
            and (params.get("ShouldDecrementDesiredCapacity") or ["false"])[0] == "false"
        ):
            instance = (params.get("InstanceId") or [""])[0]
            short = await run_in_threadpool(fleet.group_short_of_capacity, instance)
            if short is not None:
                with fleet.launch_withheld(short):
                    return await pass_on(request, body)
        return await pass_on(request, body)

    async def describe_instance_status(request: Request, params: dict[str, list[str]]) -> Response:
        """moto's statuses (every one: paging is done here, as moto does none) plus events."""
        max_results = next(iter(params.get("MaxResults", ())), None)
        next_token = next(iter(params.get("NextToken", ())), None)
        with_ids = any(key.startswith("InstanceId.") for key in params)
        try:
            size = page_size(max_results, with_ids)
        except EventProblem as exc:
            return Response(error_xml("ec2", exc.code, str(exc)), 400, media_type="text/xml")
        upstream = [
            (key, value)
            for key, values in params.items()
            if key not in ("MaxResults", "NextToken")
            for value in values
        ]
        answer = await pass_on(request, urlencode(upstream).encode())
        if answer.status_code != 200:
            return answer
        try:
            body = with_events(bytes(answer.body), scheduled, size, next_token)
        except EventProblem as exc:
            return Response(error_xml("ec2", exc.code, str(exc)), 400, media_type="text/xml")
        return Response(body, media_type="text/xml")

    def event_json(event_id: str) -> dict[str, Any]:
        found = next(e for e in scheduled.all() if e.event_id == event_id)
        return {"instance_id": found.instance_id, **found.wire()}

    async def create_event(request: Request) -> Response:
        try:
            wanted = EventRequest.model_validate(await request.json())
        except (ValueError, ValidationError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        instance = wanted.instance_id
        if instance is None and wanted.node is not None:
            instance = await run_in_threadpool(fleet.instance_of, wanted.node)
            if instance is None:
                return JSONResponse({"error": f"no instance for node {wanted.node}"}, 404)
        if instance is None:
            return JSONResponse({"error": "give instance_id or node"}, status_code=400)
        try:
            event = scheduled.create(instance, wanted)
        except EventProblem as exc:
            return JSONResponse({"error": str(exc), "code": exc.code}, status_code=exc.status)
        return JSONResponse({"instance_id": instance, **event.wire()}, status_code=201)

    async def change_event(request: Request) -> Response:
        event_id, verb = request.path_params["event_id"], request.path_params["verb"]
        try:
            if verb == "reschedule":
                try:
                    moved = RescheduleRequest.model_validate(await request.json())
                except (ValueError, ValidationError) as exc:
                    return JSONResponse({"error": str(exc)}, status_code=400)
                scheduled.reschedule(event_id, moved.not_before)
            elif verb == "complete":
                scheduled.end(event_id, "completed")
            elif verb == "cancel":
                scheduled.end(event_id, "canceled")
            else:
                return JSONResponse({"error": f"unknown verb {verb!r}"}, status_code=404)
        except EventProblem as exc:
            return JSONResponse({"error": str(exc), "code": exc.code}, status_code=exc.status)
        return JSONResponse(event_json(event_id))

    async def list_events(_request: Request) -> Response:
        return JSONResponse(
            {"events": [{"instance_id": e.instance_id, **e.wire()} for e in scheduled.all()]}
        )

    async def pass_on(request: Request, body: bytes) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        upstream = await client.request(
            request.method,
            request.url.path,
            params=list(request.query_params.multi_items()),
            content=body,
            headers=headers,
        )
        out: dict[str, Any] = {
            k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS
        }
        if upstream.status_code == 200 and reboot is not None:
            for instance in reboot_targets(body.decode(errors="replace")):
                node = fleet.node_of(instance)
                if node is not None:
                    reboot(node)
        return Response(upstream.content, status_code=upstream.status_code, headers=out)

    return Starlette(
        routes=[
            Route("/_sim/faults", faults, methods=["POST"]),
            Route("/_sim/events", create_event, methods=["POST"]),
            Route("/_sim/events", list_events, methods=["GET"]),
            Route("/_sim/events/{event_id}/{verb}", change_event, methods=["POST"]),
            Route("/{path:path}", forward, methods=["GET", "POST"]),
        ]
    )
