"""Compute Engine host maintenance for `sim serve --cloud gce`: instances as `instances.get` and
`instances.list` show them, with the maintenance Compute Engine announces, and
`instances.performMaintenance`.

In compute v1 the announcement is `resourceStatus.upcomingMaintenance` on the Instance (the
client's `Instance.resource_status.upcoming_maintenance`; the beta API had it on the Instance
itself): `type` (SCHEDULED, UNSCHEDULED, …), `canReschedule`, `windowStartTime`,
`windowEndTime`, `latestWindowStartTime` (RFC 3339) and `maintenanceStatus` (PENDING, then
ONGOING while it runs). `performMaintenance` starts it now where `canReschedule` is true: a zonal
Operation of type "performMaintenance" (a `requestId` seen before returns the same operation); a
GPU VM cannot live-migrate, so its Node reboots, and the announcement clears. `instances.list`
pages with `maxResults` and `pageToken`.

Injected with `POST /_sim/maintenance` `{"instance", "type"?, "can_reschedule"?,
"window_start", "window_end"?, "latest_window_start"?}` (again for the same instance: the cloud
rescheduled it); `POST /_sim/maintenance/{instance}/complete` runs it as the cloud would (the
Node reboots, the announcement clears), `.../cancel` withdraws it.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from remediator.sim.cloud.gce.service import PROJECT, ZONE, SimGce, _error, rfc3339, zone_url

MAX_RESULTS = 500


class MaintenanceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: str
    type: Literal["SCHEDULED", "UNSCHEDULED", "MULTIPLE", "UNKNOWN_TYPE"] = "SCHEDULED"
    can_reschedule: bool = True
    window_start: AwareDatetime
    window_end: AwareDatetime | None = None
    latest_window_start: AwareDatetime | None = None


class GceMaintenance:
    """The announcements, by instance name; state is guarded by the service's lock."""

    def __init__(self, gce: SimGce) -> None:
        self.gce = gce
        self.upcoming: dict[str, dict[str, Any]] = {}

    def announce(self, wanted: MaintenanceRequest) -> dict[str, Any] | None:
        with self.gce._lock:
            if wanted.instance not in self.gce.instances:
                return None
            upcoming: dict[str, Any] = {
                "type": wanted.type,
                "canReschedule": wanted.can_reschedule,
                "windowStartTime": rfc3339(wanted.window_start),
                "maintenanceStatus": "PENDING",
            }
            if wanted.window_end is not None:
                upcoming["windowEndTime"] = rfc3339(wanted.window_end)
            if wanted.latest_window_start is not None:
                upcoming["latestWindowStartTime"] = rfc3339(wanted.latest_window_start)
            self.upcoming[wanted.instance] = upcoming
            return dict(upcoming)

    def withdraw(self, name: str) -> bool:
        with self.gce._lock:
            return self.upcoming.pop(name, None) is not None

    def run(self, name: str) -> bool:
        """The maintenance happens: the VM stops and comes back (its Node reboots)."""
        with self.gce._lock:
            upcoming = self.upcoming.get(name)
            if upcoming is None:
                return False
            upcoming["maintenanceStatus"] = "ONGOING"
        if self.gce.reboot is not None:
            self.gce.reboot(name)
        with self.gce._lock:
            self.upcoming.pop(name, None)
        return True

    def instance_json(self, name: str) -> dict[str, Any] | None:
        with self.gce._lock:
            inst = self.gce.instances.get(name)
            if inst is None:
                return None
            out: dict[str, Any] = {
                "kind": "compute#instance",
                "id": str(inst.id),
                "name": name,
                "zone": zone_url(ZONE),
                "status": inst.status or "PROVISIONING",
                "selfLink": f"{zone_url(ZONE)}/instances/{name}",
            }
            upcoming = self.upcoming.get(name)
            if upcoming is not None:
                out["resourceStatus"] = {"upcomingMaintenance": dict(upcoming)}
            return out

    def perform(self, name: str, request_id: str | None) -> dict[str, Any]:
        """KeyError: no such VM; ValueError: nothing to start now (the reason)."""
        now = datetime.now(UTC)
        gce = self.gce
        with gce._lock:
            if request_id and request_id in gce.by_request:
                return dict(gce.ops[gce.by_request[request_id]])
            target = gce.instances.get(name)
            if target is None:
                raise KeyError(name)
            upcoming = self.upcoming.get(name)
            if upcoming is None:
                raise ValueError(f"instance {name} has no upcoming maintenance")
            if not upcoming.get("canReschedule"):
                raise ValueError(f"the maintenance of instance {name} cannot be triggered")
            op = gce.begin_instance_operation(
                "performMaintenance", name, str(target.id), request_id, now
            )
            answer = dict(op)
        self.run(name)
        gce.finish_operation(op)
        return answer


def _page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"sim:{offset}".encode()).decode()


def _offset(token: str) -> int | None:
    try:
        prefix, _, number = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return int(number) if prefix == "sim" and number.isdigit() else None


def maintenance_routes(gce: SimGce, maintenance: GceMaintenance) -> list[Route]:
    prefix = "/compute/v1/projects/{project}/zones/{zone}"

    def missing(name: str) -> JSONResponse:
        what = f"projects/{PROJECT}/zones/{ZONE}/instances/{name}"
        return _error(404, "notFound", f"The resource '{what}' was not found", "NOT_FOUND")

    def throttled() -> Response | None:
        """`POST /_sim/faults {"type": "throttle_instances", "count": N}` throttles these."""
        with gce._lock:
            if gce.faults.throttle_instances > 0:
                gce.faults.throttle_instances -= 1
                return _error(429, "rateLimitExceeded", "Rate Limit Exceeded", "RESOURCE_EXHAUSTED")
        return None

    def invalid(message: str) -> JSONResponse:
        return _error(400, "invalid", message, "INVALID_ARGUMENT")

    async def get_instance(request: Request) -> Response:
        name = request.path_params["instance"]
        found = maintenance.instance_json(name)
        return missing(name) if found is None else throttled() or JSONResponse(found)

    async def list_instances(request: Request) -> Response:
        raw_max = request.query_params.get("maxResults", str(MAX_RESULTS))
        if not raw_max.isdigit() or not 0 <= int(raw_max) <= MAX_RESULTS:
            return invalid(f"Invalid value for field 'maxResults': '{raw_max}'. Must be 0-500")
        size = int(raw_max) or MAX_RESULTS
        token = request.query_params.get("pageToken")
        start = 0
        if token:
            found = _offset(token)
            if found is None:
                return invalid(f"Invalid value for field 'pageToken': '{token[:40]}'")
            start = found
        with gce._lock:
            names = sorted(gce.instances)
        items = [maintenance.instance_json(n) for n in names[start : start + size]]
        body: dict[str, Any] = {
            "kind": "compute#instanceList",
            "id": f"projects/{PROJECT}/zones/{ZONE}/instances",
            "items": [i for i in items if i is not None],
            "selfLink": f"{zone_url(ZONE)}/instances",
        }
        if start + size < len(names):
            body["nextPageToken"] = _page_token(start + size)
        return throttled() or JSONResponse(body)

    async def perform(request: Request) -> Response:
        throttle = throttled()
        if throttle:
            return throttle
        name = request.path_params["instance"]
        try:
            op = maintenance.perform(name, request.query_params.get("requestId"))
        except KeyError:
            return missing(name)
        except ValueError as exc:
            return _error(400, "conditionNotMet", str(exc), "FAILED_PRECONDITION")
        return JSONResponse(op)

    async def announce(request: Request) -> Response:
        try:
            wanted = MaintenanceRequest.model_validate(await request.json())
        except (ValueError, ValidationError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        upcoming = maintenance.announce(wanted)
        if upcoming is None:
            return JSONResponse({"error": f"no instance {wanted.instance}"}, status_code=404)
        return JSONResponse({"instance": wanted.instance, "upcomingMaintenance": upcoming})

    async def end(request: Request) -> Response:
        name, verb = request.path_params["instance"], request.path_params["verb"]
        if verb not in ("complete", "cancel"):
            return JSONResponse({"error": f"unknown verb {verb!r}"}, status_code=404)
        done = maintenance.run(name) if verb == "complete" else maintenance.withdraw(name)
        if not done:
            return JSONResponse({"error": f"no maintenance on {name}"}, status_code=404)
        return JSONResponse({"instance": name, "ended": verb})

    return [
        Route(f"{prefix}/instances", list_instances, methods=["GET"]),
        Route(f"{prefix}/instances/{{instance}}", get_instance, methods=["GET"]),
        Route(f"{prefix}/instances/{{instance}}/performMaintenance", perform, methods=["POST"]),
        Route("/_sim/maintenance", announce, methods=["POST"]),
        Route("/_sim/maintenance/{instance}/{verb}", end, methods=["POST"]),
    ]
