"""The simulated Kubernetes API server: an ASGI app over the ObjectStore and the SimCluster.

It speaks the wire protocol of a real API server closely enough that stock kubectl and the
official Python client work against it unchanged: discovery, CRUD with optimistic concurrency,
the three patch types, chunked lists, watches, server-side Tables, the eviction subresource, and
errors as `Status` objects. Pod deletion, eviction and node removal are the cluster's business
(graceful termination, PDBs, garbage collection), so they are delegated to it.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from remediator.clock import Clock, SystemClock
from remediator.sim.kube.api import discovery, openapi, tables
from remediator.sim.kube.api.admission import admit_pod, check_priority
from remediator.sim.kube.api.discovery import BY_PATH, Resource
from remediator.sim.kube.api.encoding import EncodedObjects
from remediator.sim.kube.api.paging import Snapshots
from remediator.sim.kube.api.patch import apply_patch
from remediator.sim.kube.api.selectors import parse_field_selector, parse_label_selector
from remediator.sim.kube.api.store import (
    ApiError,
    BadRequest,
    Conflict,
    InternalError,
    Invalid,
    MethodNotAllowed,
    NotFound,
    Obj,
    ObjectStore,
    UnsupportedMediaType,
    not_found,
)
from remediator.sim.kube.api.watch import DEFAULT_TIMEOUT, WatchRequest, WatchStream

log = logging.getLogger(__name__)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Metadata the server owns: a client's update or patch cannot change these.
_SERVER_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)
# Resources whose strategy tracks spec changes in metadata.generation (controllers compare it
# with status.observedGeneration) and starts status empty on create.
_GENERATION = frozenset(
    {
        "apps/daemonsets",
        "apps/replicasets",
        "apps/deployments",
        "batch/jobs",
        "policy/poddisruptionbudgets",
    }
)


def select_own_pods(job: Obj, uid: str) -> None:
    """The Job's defaulting a real API server does (unless `spec.manualSelector`): a selector
    on the Job's own uid and those labels on its template. Without it a client that follows
    the selector (`kubectl logs job/NAME`) matched every pod of the namespace."""
    spec = job.setdefault("spec", {})
    if spec.get("manualSelector"):
        return
    name = job["metadata"].get("name", "")
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    labels.update(
        {
            "controller-uid": uid,
            "batch.kubernetes.io/controller-uid": uid,
            "job-name": name,
            "batch.kubernetes.io/job-name": name,
        }
    )
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


class ClusterOps(Protocol):
    """What the server needs from the SimCluster (remediator/sim/kube/controllers/cluster.py)."""

    store: ObjectStore

    def delete_pod(
        self,
        namespace: str,
        name: str,
        grace_period_seconds: int | None = None,
        uid_precondition: str | None = None,
    ) -> Obj: ...

    def evict(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None: ...

    def remove_node(self, name: str) -> None: ...

    def pod_log(self, namespace: str, name: str) -> str:
        """What the pod's container printed so far (host programs print when they exit)."""
        ...


class NotAcceptable(ApiError):
    code, reason = 406, "NotAcceptable"


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _status_response(exc: ApiError) -> Response:
    return _json(exc.status(), exc.code, exc.headers)


def _success(res: Resource, name: str, uid: str = "", code: int = 200) -> Obj:
    details: Obj = {"name": name, "kind": res.plural}
    if res.group:
        details["group"] = res.group
    if uid:
        details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
        "code": code,
    }


def _conflict(res: Resource, name: str) -> Conflict:
    return Conflict(
        f"Operation cannot be fulfilled on {res.plural}{'.' + res.group if res.group else ''} "
        f'"{name}": the object has been modified; please apply your changes to the latest '
        "version and try again",
        details={"name": name, "kind": res.plural, **({"group": res.group} if res.group else {})},
    )


def _invalid(res: Resource, name: str, field: str, message: str) -> Invalid:
    return Invalid(
        f'{res.kind} "{name}" is invalid: {field}: {message}',
        details={
            "name": name,
            "kind": res.kind,
            **({"group": res.group} if res.group else {}),
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}],
        },
    )


def _table_version(accept: str) -> str | None:
    """The meta.k8s.io Table version the first acceptable media range asks for, if any."""
    for media_range in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in media_range.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            if params.get("v") in ("v1", "v1beta1"):
                return params["v"]
            continue
        if media_range.split(";")[0].strip() in ("application/json", "*/*", "application/*", ""):
            return None
    raise NotAcceptable("only the following media types are accepted: application/json")


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise BadRequest(f"invalid value for {name}: {raw!r}") from exc


def _grace_option(value: Any) -> int | None:
    """DeleteOptions.gracePeriodSeconds as the server decodes it: an integer or absent; any other
    JSON is the client's mistake (400), as a real server's decoder answers."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"DeleteOptions.gracePeriodSeconds must be an integer, not {value!r}")
    return value


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


async def _body(request: Request) -> Any:
    """JSON (or YAML) only: a protobuf body (kubectl's typed generators, e.g. `kubectl create
    namespace`) gets the 415 a server that does not speak the format answers."""
    raw = await request.body()
    if not raw.strip():
        return None
    media = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if media == "application/yaml":
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise BadRequest(f"the request body is not valid YAML: {exc}") from exc
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType(
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json, application/yaml (got {media})"
        )
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from exc


class KubeApi:
    """Request handling; one instance per app, sharing the cluster's store."""

    def __init__(self, cluster: ClusterOps, clock: Clock) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.clock = clock
        self.snapshots = Snapshots()
        self.encoded = EncodedObjects()
        for ns in SYSTEM_NAMESPACES:
            if self.store.find("namespaces", "", ns) is None:
                self.store.create(
                    "namespaces",
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": ns},
                        "spec": {"finalizers": ["kubernetes"]},
                        "status": {"phase": "Active"},
                    },
                )

    # -- entry ---------------------------------------------------------------------------------

    async def dispatch(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except ApiError as exc:
            return _status_response(exc)
        except Exception as exc:
            # A bug here must still reach the client as a Status, as a real server's would.
            log.exception("%s %s failed", request.method, request.url.path)
            return _status_response(InternalError(f"Internal error occurred: {exc}"))

    async def _route(self, request: Request) -> Response:
        path = request.url.path.rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        if path == "/version":
            return _json(discovery.KUBE_VERSION)
        if path in ("/healthz", "/livez", "/readyz"):
            return Response("ok", media_type="text/plain")
        if path == "/api":
            return _json(discovery.api_versions(f"{request.url.hostname}:{request.url.port}"))
        if path == "/apis":
            return _json(discovery.api_group_list())
        if path == "/openapi/v3":
            return _json(openapi.root_document())
        if path.startswith("/openapi/v3/"):
            rest = parts[2:]
            document = None
            if len(rest) == 2 and rest[0] == "api":
                document = openapi.group_version_document("", rest[1])
            elif len(rest) == 3 and rest[0] == "apis":
                document = openapi.group_version_document(rest[1], rest[2])
            if document is None:
                raise NotFound("the server could not find the requested resource")
            return _json(document)
        if parts and parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts and parts[0] == "apis" and len(parts) >= 2:
            if len(parts) == 2:
                body = discovery.api_group(parts[1])
                if body is None:
                    raise NotFound("the server could not find the requested resource")
                return _json(body)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise NotFound("the server could not find the requested resource")
        if not rest:
            listing = discovery.resource_list(group, version)
            if listing is None:
                raise NotFound("the server could not find the requested resource")
            return _json(listing)
        return await self._resource(request, group, version, rest)

    async def _resource(
        self, request: Request, group: str, version: str, rest: list[str]
    ) -> Response:
        namespace: str | None = None
        # /api/v1/namespaces/{name}/status is the namespace's own subresource, not a resource.
        if rest[0] == "namespaces" and len(rest) >= 3 and (group or rest[2] != "status"):
            namespace, rest = rest[1], rest[2:]
        res = BY_PATH.get((group, version, rest[0]))
        if res is None or len(rest) > 3:
            raise NotFound("the server could not find the requested resource")
        if namespace is not None and not res.namespaced:
            raise NotFound("the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if sub is not None and sub not in res.subresources:
            raise NotFound("the server could not find the requested resource")
        method = request.method
        if name is None:
            if method == "GET":
                if _truthy(request.query_params.get("watch")):
                    return self._watch(request, res, namespace)
                return self._list(request, res, namespace)
            if method == "POST" and (namespace is not None or not res.namespaced):
                return self._create(res, namespace or "", await _body(request))
            raise MethodNotAllowed(
                f"the server does not allow this method on the requested resource ({method})"
            )
        if res.namespaced and namespace is None:
            raise NotFound("the server could not find the requested resource")
        ns = namespace or ""
        handlers: dict[tuple[str | None, str], Callable[[], Awaitable[Response]]] = {
            (None, "GET"): lambda: self._get(request, res, ns, name),
            (None, "PUT"): lambda: self._update(request, res, ns, name, status=False),
            (None, "PATCH"): lambda: self._patch(request, res, ns, name, status=False),
            (None, "DELETE"): lambda: self._delete(request, res, ns, name),
            ("status", "GET"): lambda: self._get(request, res, ns, name),
            ("status", "PUT"): lambda: self._update(request, res, ns, name, status=True),
            ("status", "PATCH"): lambda: self._patch(request, res, ns, name, status=True),
            ("eviction", "POST"): lambda: self._evict(request, ns, name),
            ("log", "GET"): lambda: self._log(ns, name),
        }
        handler = handlers.get((sub, method))
        if handler is None:
            raise MethodNotAllowed(
                f"the server does not allow this method on the requested resource ({method})"
            )
        return await handler()

    # -- rendering -----------------------------------------------------------------------------

    def _full(self, res: Resource, obj: Obj) -> Obj:
        if obj.get("kind") == res.kind and obj.get("apiVersion") == res.api_version:
            return obj
        return {**obj, "kind": res.kind, "apiVersion": res.api_version}

    def _one(self, request: Request, res: Resource, obj: Obj, status: int = 200) -> Response:
        table = _table_version(request.headers.get("accept", ""))
        if table is None:
            return _json(self._full(res, obj), status)
        return _json(
            self._table(
                request,
                res,
                [obj],
                table,
                str(obj.get("metadata", {}).get("resourceVersion", "")),
                "",
                True,
            ),
            status,
        )

    def _table(
        self,
        request: Request,
        res: Resource,
        items: list[Obj],
        version: str,
        rv: str,
        token: str,
        with_columns: bool,
        remaining: int = 0,
    ) -> Obj:
        include = request.query_params.get("includeObject") or "Metadata"
        if include not in ("None", "Metadata", "Object"):
            raise BadRequest(f"unrecognized includeObject value: {include!r}")
        now = self.clock.now()
        meta: Obj = {"resourceVersion": rv}
        if token:
            meta["continue"] = token
        if remaining:
            meta["remainingItemCount"] = remaining
        return {
            "kind": "Table",
            "apiVersion": f"meta.k8s.io/{version}",
            "metadata": meta,
            "columnDefinitions": tables.column_definitions(res.key) if with_columns else [],
            "rows": [
                tables.table_row(res.key, o, now, include, res.api_version, res.kind) for o in items
            ],
        }

    # -- reads ---------------------------------------------------------------------------------

    async def _log(self, ns: str, name: str) -> Response:
        self.store.get("pods", ns, name)  # 404 for a pod that does not exist
        return Response(self.cluster.pod_log(ns, name), media_type="text/plain")

    async def _get(self, request: Request, res: Resource, ns: str, name: str) -> Response:
        return self._one(request, res, self.store.get(res.key, ns, name))

    def _list(self, request: Request, res: Resource, namespace: str | None) -> Response:
        table = _table_version(request.headers.get("accept", ""))
        limit = _int_param(request, "limit") or 0
        token = request.query_params.get("continue")
        labels_q = request.query_params.get("labelSelector")
        fields_q = request.query_params.get("fieldSelector")
        if token:
            page = self.snapshots.next_page(token, limit)
        else:
            labels = parse_label_selector(labels_q)
            fields = parse_field_selector(fields_q, res.key)
            items, rv = self.store.list(res.key, namespace)
            if namespace is None:
                self.encoded.forget_all_but(res.key, items)
            name = fields.exact_name()
            selected = [
                o
                for o in items
                if (name is None or o["metadata"].get("name") == name)
                and labels.matches(o["metadata"].get("labels"))
                and fields.matches(o)
            ]
            selected.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
            page = self.snapshots.first_page(selected, rv, limit)
        remaining = page.remaining if not (labels_q or fields_q) else 0
        if table is not None:
            return _json(
                self._table(
                    request,
                    res,
                    page.items,
                    table,
                    str(page.resource_version),
                    page.continue_token,
                    True,
                    remaining,
                )
            )
        meta: Obj = {"resourceVersion": str(page.resource_version)}
        if page.continue_token:
            meta["continue"] = page.continue_token
        if remaining:
            meta["remainingItemCount"] = remaining
        head = {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta}
        return Response(
            self.encoded.list_body(res.key, head, page.items), media_type="application/json"
        )

    def _watch(self, request: Request, res: Resource, namespace: str | None) -> Response:
        table = _table_version(request.headers.get("accept", ""))
        timeout = _int_param(request, "timeoutSeconds")
        req = WatchRequest(
            resource=res.key,
            namespace=namespace,
            labels=parse_label_selector(request.query_params.get("labelSelector")),
            fields=parse_field_selector(request.query_params.get("fieldSelector"), res.key),
            resource_version=request.query_params.get("resourceVersion", ""),
            timeout=float(timeout) if timeout else DEFAULT_TIMEOUT,
            bookmarks=_truthy(request.query_params.get("allowWatchBookmarks")),
            send_initial_events=_truthy(request.query_params.get("sendInitialEvents")),
            kind=res.kind,
            api_version=res.api_version,
        )

        def render(obj: Obj, first: bool) -> Obj:
            if table is None:
                return self._full(res, obj)
            rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
            return self._table(request, res, [obj], table, rv, "", first)

        stream = WatchStream(self.store, req, render)
        return StreamingResponse(stream.lines(), media_type="application/json")

    # -- writes --------------------------------------------------------------------------------

    def _validate(self, res: Resource, obj: Obj) -> None:
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        candidate = name.rstrip("-") if not obj["metadata"].get("name") else name
        if candidate and (len(name) > 253 or not _DNS_SUBDOMAIN.match(candidate)):
            raise _invalid(
                res,
                name,
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            )
        if res.key == "pods" and not (obj.get("spec") or {}).get("containers"):
            raise _invalid(res, name, "spec.containers", "Required value")

    def _check_kind(self, res: Resource, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if (kind and kind != res.kind) or (api_version and api_version != res.api_version):
            raise BadRequest(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({res.api_version})"
                if kind == res.kind
                else f"the kind in the data ({kind}) does not match the expected kind ({res.kind})"
            )
        return body

    def _create(self, res: Resource, ns: str, body: Any) -> Response:
        obj = copy.deepcopy(self._check_kind(res, body))
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise BadRequest(
                    "the namespace of the provided object does not match the "
                    "namespace sent on the request"
                )
            meta["namespace"] = ns
            if self.store.find("namespaces", "", ns) is None:
                raise not_found("namespaces", ns)
        else:
            meta.pop("namespace", None)
        for field in (*_SERVER_META, "resourceVersion"):
            meta.pop(field, None)
        self._validate(res, obj)
        if res.key == "pods":
            obj["status"] = {"phase": "Pending"}
            check_priority(obj)
            admit_pod(obj)
        if res.key in _GENERATION:
            meta["generation"] = 1
            obj["status"] = {}
        uid = None
        if res.key == "batch/jobs":
            uid = str(uuid.uuid4())
            select_own_pods(obj, uid)
        created = self.store.create(res.key, obj, uid)
        return _json(self._full(res, created), 201)

    def _merge_server_fields(self, res: Resource, current: Obj, new: Obj, status: bool) -> Obj:
        """Keep what the client may not change through this endpoint: server-owned metadata,
        and (for resources with a status subresource) status on the main resource, everything
        but status on /status."""
        meta = new.setdefault("metadata", {})
        for field in _SERVER_META:
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
            else:
                meta.pop(field, None)
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if "status" in res.subresources:
            if status:
                new = {**current, "status": new.get("status", current.get("status"))}
            elif "status" in current:
                new["status"] = current["status"]
            else:
                new.pop("status", None)
        if res.key in _GENERATION and new.get("spec") != current.get("spec"):
            new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        return new

    async def _update(
        self, request: Request, res: Resource, ns: str, name: str, *, status: bool
    ) -> Response:
        body = copy.deepcopy(self._check_kind(res, await _body(request)))
        meta = body.setdefault("metadata", {})
        if meta.get("name") != name:
            raise BadRequest(
                f"the name of the object ({meta.get('name')}) does not match the "
                f"name on the URL ({name})"
            )
        if res.namespaced and meta.get("namespace") not in (None, "", ns):
            raise BadRequest(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        if res.namespaced:
            meta["namespace"] = ns
        expected = meta.get("resourceVersion") or None

        def change(current: Obj) -> Obj:
            if expected and expected != current["metadata"]["resourceVersion"]:
                raise _conflict(res, name)
            return self._merge_server_fields(res, current, body, status)

        self._validate(res, body)
        return self._one(request, res, self.store.mutate(res.key, ns, name, change))

    async def _patch(
        self, request: Request, res: Resource, ns: str, name: str, *, status: bool
    ) -> Response:
        content_type = request.headers.get("content-type", "")
        patch = await _body(request)
        if patch is None:
            raise BadRequest("the request body of a patch must not be empty")

        def change(current: Obj) -> Obj:
            patched = apply_patch(res.key, content_type, current, patch)
            meta = patched.get("metadata")
            if not isinstance(meta, dict):
                raise _invalid(res, name, "metadata", "Required value")
            wanted = meta.get("resourceVersion")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise _conflict(res, name)
            if meta.get("name") != name or meta.get("namespace", "") != ns:
                raise _invalid(res, name, "metadata.name", "Invalid value: field is immutable")
            return self._merge_server_fields(res, current, patched, status)

        return self._one(request, res, self.store.mutate(res.key, ns, name, change))

    async def _delete(self, request: Request, res: Resource, ns: str, name: str) -> Response:
        options = await _body(request) or {}
        if not isinstance(options, dict):
            raise BadRequest("DeleteOptions must be a JSON object")
        grace = _int_param(request, "gracePeriodSeconds")
        if options.get("gracePeriodSeconds") is not None:
            grace = _grace_option(options["gracePeriodSeconds"])
        preconditions = options.get("preconditions") or {}
        if not isinstance(preconditions, dict):
            raise BadRequest("DeleteOptions.preconditions must be a JSON object")
        current = self.store.get(res.key, ns, name)
        meta = current["metadata"]
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise Conflict(
                f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                f"UID in object meta: {meta.get('uid')}",
                details={"name": name, "kind": res.plural},
            )
        rv_pre = preconditions.get("resourceVersion")
        if rv_pre and rv_pre != meta.get("resourceVersion"):
            raise Conflict(
                f"Precondition failed: ResourceVersion in precondition: {rv_pre}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
                details={"name": name, "kind": res.plural},
            )
        if res.key == "pods":
            pod = self.cluster.delete_pod(ns, name, grace, preconditions.get("uid"))
            return _json(self._full(res, pod))
        if res.key == "nodes":
            self.cluster.remove_node(name)
        else:
            self.store.delete(res.key, ns, name)
        return _json(_success(res, name, meta.get("uid", "")))

    async def _evict(self, request: Request, ns: str, name: str) -> Response:
        body = await _body(request) or {}
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a policy/v1 Eviction")
        meta_name = (body.get("metadata") or {}).get("name")
        if meta_name and meta_name != name:
            raise BadRequest("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        if not isinstance(options, dict):
            raise BadRequest("Eviction.deleteOptions must be a JSON object")
        self.cluster.evict(ns, name, _grace_option(options.get("gracePeriodSeconds")))
        return _json(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
            201,
        )


def create_kube_app(cluster: ClusterOps, *, clock: Clock | None = None) -> Starlette:
    """The API server as an ASGI app. Like the old insecure port it authenticates nobody:
    client-go never sends a bearer token over plain HTTP, and loopback is the only network."""
    api = KubeApi(cluster, clock or SystemClock())
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(
        routes=[
            Route("/", api.dispatch, methods=methods),
            Route("/{path:path}", api.dispatch, methods=methods),
        ]
    )
