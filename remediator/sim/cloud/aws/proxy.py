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
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import httpx
from pydantic import BaseModel, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from remediator.sim.cloud.aws.activities import describe_response
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
    fleet: SimAwsFleet, moto_url: str, reboot: Callable[[str], None] | None = None
) -> Starlette:
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
            Route("/{path:path}", forward, methods=["GET", "POST"]),
        ]
    )
