"""The typed edge to the Kubernetes API: the only module (with leader.py's use of it) that touches
the `kubernetes` package.

Requests go through the official client's transport (kubeconfig and in-cluster auth, TLS,
connection pool) but speak raw JSON: the generated models would cost a deserialisation pass per
object on 100-pod lists and drop fields they do not know. Every library exception is turned into
one of remediator.errors at this edge, once: an answer the API did not act on (429 from API
Priority and Fairness, 5xx, a timeout, a lost connection) is `ApiUnavailable` carrying the
server's Retry-After, so steps wait instead of failing; 409 is `ConflictError` (re-read and
retry); 404 is `NotFoundError`, and an eviction's 404 counts as "gone" only once a fresh read
agrees. Every call carries a timeout and takes a token from the shared rate limit; writes go only
while `may_write` says this replica may act (the leader's fence).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from remediator.clock import Clock, SystemClock
from remediator.errors import (
    ApiUnavailable,
    ConflictError,
    NotActing,
    NotFoundError,
    PermanentError,
    RemediatorError,
    TransientError,
)
from remediator.kube.objects import (
    EvictionOutcome,
    EvictionResult,
    Lease,
    Node,
    ObjectRef,
    Pod,
    PodDisruptionBudget,
    Taint,
    format_time,
)
from remediator.kube.ratelimit import TokenBucket

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
COMPONENT = "remediator"
CONFLICT_RETRIES = 8
CONFLICT_BACKOFF = 0.02
_T = TypeVar("_T")
LIST_PAGE_SIZE = 500  # client-go's reflector pages its initial LIST at 500


def _status_message(body: str | None) -> tuple[str, JSON]:
    """The `message` of a Status body (and the body itself), tolerating non-JSON bodies."""
    if not body:
        return "", {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[:200], {}
    if not isinstance(parsed, dict):
        return body[:200], {}
    return str(parsed.get("message", "")), parsed


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


UNAVAILABLE_DELAY = 1.0


def unavailable(status: int) -> bool:
    """Statuses that mean the API server did not do what was asked, and may later."""
    return status in (0, 408, 429) or status >= 500


def wrap_api_exception(exc: ApiException, what: str) -> RemediatorError:
    """Map an HTTP failure onto our error classes (the caller raises it `from exc`)."""
    message, _ = _status_message(exc.body)
    text = f"{what}: {exc.status} {message or exc.reason}"
    status = exc.status or 0
    if status == 410:
        return ResourceExpired(text, delay=0.0)
    if status == 404:
        return NotFoundError(text)
    if status == 409:
        return ConflictError(text)
    if unavailable(status):
        return ApiUnavailable(text, _retry_after(exc) or UNAVAILABLE_DELAY, status)
    return PermanentError(text)


def connection_error(exc: Exception, what: str) -> ApiUnavailable:
    return ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}", UNAVAILABLE_DELAY, 0)


class ResourceExpired(TransientError):
    """410 Gone: the resource version a watch started from is older than the server keeps;
    list again and watch from the new one."""


class KubeClient:
    """Typed, timeout-bound operations on nodes, pods, events and leases."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        timeout: float = 10.0,
        clock: Clock | None = None,
        *,
        limiter: TokenBucket | None = None,
        may_write: Callable[[], bool] | None = None,
    ) -> None:
        self._api = api_client
        self._timeout = (min(5.0, timeout), timeout)
        self._clock = clock or SystemClock()
        self._instance = socket.gethostname()
        self._limiter = limiter
        self._may_write = may_write

    def guarded(
        self, *, limiter: TokenBucket | None, may_write: Callable[[], bool] | None
    ) -> KubeClient:
        """The same connection pool behind a rate limit and a write fence: the controller's jobs
        use this one, leader election the unguarded original (its renewals must neither queue
        behind a drain's evictions nor be fenced by the leadership they keep)."""
        return KubeClient(
            self._api,
            self._timeout[1],
            self._clock,
            limiter=limiter,
            may_write=may_write,
        )

    def set_user_agent(self, agent: str) -> None:
        """Name this replica to the API server (its audit log, APF flows, and the simulator's
        per-client faults)."""
        self._api.user_agent = agent

    # -- construction ------------------------------------------------------------------------

    @staticmethod
    def _configuration() -> k8s.Configuration:
        cfg = k8s.Configuration()
        # We own retries (per step, with backoff); urllib3's silent ones would hide outages and
        # could repeat a POST.
        cfg.retries = 0
        # Drains evict in parallel; keep one pooled connection per worker.
        cfg.connection_pool_maxsize = 32
        return cfg

    @classmethod
    def from_kubeconfig(
        cls, path: Path, context: str | None = None, timeout: float = 10.0
    ) -> KubeClient:
        cfg = cls._configuration()
        try:
            k8s_config.load_kube_config(
                config_file=str(path),
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
        except (ConfigException, OSError, ValueError) as exc:
            raise PermanentError(f"kubeconfig {path}: {exc}") from exc
        except (yaml.YAMLError, TypeError, AttributeError, KeyError) as exc:
            # The loader assumes a well-formed mapping and fails with whatever the YAML gives it.
            raise PermanentError(
                f"kubeconfig {path}: not a valid kubeconfig ({type(exc).__name__}: {exc})"
            ) from exc
        return cls(k8s.ApiClient(cfg), timeout)

    @classmethod
    def in_cluster(cls, timeout: float = 10.0) -> KubeClient:
        cfg = cls._configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except ConfigException as exc:
            raise PermanentError(f"in-cluster config: {exc}") from exc
        return cls(k8s.ApiClient(cfg), timeout)

    @classmethod
    def connect(cls, kubeconfig: Path | None, timeout: float = 10.0) -> KubeClient:
        """The kubeconfig when one is given, else the pod's service account."""
        return (
            cls.from_kubeconfig(kubeconfig, timeout=timeout)
            if kubeconfig
            else cls.in_cluster(timeout)
        )

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Any,
        content_type: str | None,
        timeout: tuple[float, float] | None = None,
    ) -> bytes:
        """One request through the official transport; raises the library's own exceptions."""
        if self._limiter is not None:
            self._limiter.take()
        # After the wait for a token: leadership may have lapsed meanwhile.
        if method != "GET" and self._may_write is not None and not self._may_write():
            raise NotActing(f"{method} {path}: this replica does not lead (or its lease lapsed)")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self._api.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*request, _request_timeout=timeout or self._timeout)
        data: bytes = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return data

    def _call(
        self,
        method: str,
        path: str,
        what: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> JSON:
        bound = (min(timeout, self._timeout[0]), timeout) if timeout else None
        try:
            data = self._send(method, path, query, body, content_type, bound)
        except ApiException as exc:
            raise wrap_api_exception(exc, what) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise connection_error(exc, what) from exc
        if not data:
            return {}
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise TransientError(f"{what}: response is not JSON") from exc
        return parsed if isinstance(parsed, dict) else {}

    # -- watches -----------------------------------------------------------------------------

    def current_version(self, path: str) -> str:
        """The collection's resourceVersion now, from a one-item list: where a watch starts."""
        data = self._call("GET", path, f"list {path}", query=[("limit", "1")])
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300) -> Iterator[JSON]:
        """The collection's watch events (`{"type", "object"}`, bookmarks included) after
        `resource_version`, until the server ends the stream; ResourceExpired on 410 Gone,
        whether the server answers it at once or sends it as an ERROR event."""
        what = f"watch {path}"
        stream = self._open_watch(path, resource_version, timeout_seconds, what)
        try:
            yield from _watch_events(stream.stream(decode_content=True), what)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise connection_error(exc, f"{what}: stream broke") from exc
        finally:
            stream.release_conn()

    def _open_watch(
        self,
        path: str,
        resource_version: str,
        timeout_seconds: int,
        what: str,
        label_selector: str | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """The open watch stream (bookmarks on); the read timeout outlasts the server's own end
        of the stream. A 410 at open is ResourceExpired."""
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
            *([("labelSelector", label_selector)] if label_selector else []),
        ]
        if self._limiter is not None:
            self._limiter.take()
        request = self._api.param_serialize(
            "GET",
            path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            response = self._api.call_api(
                *request, _request_timeout=(self._timeout[0], timeout_seconds + 30)
            )
            if not 200 <= response.status <= 299:
                response.read()
                raise ApiException.from_response(http_resp=response, body=None, data=None)
        except ApiException as exc:
            if exc.status == 410:
                raise ResourceExpired(f"{what}: 410 {exc.reason}") from exc
            raise wrap_api_exception(exc, what) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise connection_error(exc, what) from exc
        stream: urllib3.BaseHTTPResponse = response.response
        return stream

    # -- nodes -------------------------------------------------------------------------------

    def namespace_uid(self, name: str) -> str:
        """The namespace's UID: kube-system's names this cluster for as long as it exists."""
        data = self._call("GET", f"/api/v1/namespaces/{name}", f"get namespace {name}")
        uid = (data.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            raise PermanentError(f"namespace {name} has no metadata.uid")
        return uid

    def get_node(self, name: str) -> Node:
        return Node.from_json(self._call("GET", f"/api/v1/nodes/{name}", f"get node {name}"))

    def list_nodes(
        self, label_selector: str | None = None, page_size: int = LIST_PAGE_SIZE
    ) -> list[Node]:
        """Every node (with the label selector, if any), paged like `list_nodes_versioned`: a
        controller reading 10,000 nodes in one answer (a ~30 MB text, ~150 MB parsed at once)
        kept its RSS that high for good, though the Nodes it keeps are ~13 MB."""
        return self._list_nodes_paged(label_selector, page_size)[0]

    def list_nodes_versioned(self, page_size: int = LIST_PAGE_SIZE) -> tuple[list[Node], str]:
        """Every node and the list's resourceVersion, where a watch picks up from. Paged as
        client-go's reflector does: one consistent snapshot, but never the whole fleet's JSON in
        memory at once (a 2,000-node answer is ~12 MB of text, several times that parsed)."""
        return self._list_nodes_paged(None, page_size)

    def _list_nodes_paged(
        self, label_selector: str | None, page_size: int
    ) -> tuple[list[Node], str]:
        nodes: list[Node] = []
        token = ""
        selector = [("labelSelector", label_selector)] if label_selector else []
        while True:
            query = [*selector, ("limit", str(page_size))]
            if token:
                query.append(("continue", token))
            data = self._call("GET", "/api/v1/nodes", "list nodes", query=query)
            nodes.extend(Node.from_json(item) for item in data.get("items") or ())
            meta = data.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return nodes, str(meta.get("resourceVersion") or "")

    def watch_nodes(self, resource_version: str, timeout_seconds: int = 300) -> WatchStream:
        """Open a watch on nodes after `resource_version` (bookmarks on). The server ends it
        after `timeout_seconds`; a 410 (at open or as an ERROR event) is ResourceExpired."""
        what = "watch nodes"
        stream = self._open_watch("/api/v1/nodes", resource_version, timeout_seconds, what)
        return WatchStream(stream, what)

    def _patch_node(self, name: str, patch: JSON, content_type: str, what: str) -> Node:
        raw = self._call(
            "PATCH", f"/api/v1/nodes/{name}", what, body=patch, content_type=content_type
        )
        return Node.from_json(raw)

    def cordon(self, name: str) -> Node:
        return self._set_unschedulable(name, True)

    def uncordon(self, name: str) -> Node:
        return self._set_unschedulable(name, False)

    def _set_unschedulable(self, name: str, value: bool) -> Node:
        # kubectl's own patch: a strategic merge of spec.unschedulable (null removes the field).
        patch = {"spec": {"unschedulable": True if value else None}}
        what = f"{'cordon' if value else 'uncordon'} node {name}"
        return self._patch_node(name, patch, STRATEGIC_MERGE_PATCH, what)

    def annotate_and_cordon(self, name: str, annotations: Mapping[str, str | None]) -> Node:
        """Set annotations (None deletes) and cordon in one strategic merge patch: both or
        neither, one round trip instead of two before the node stops taking pods."""
        patch = {"metadata": {"annotations": dict(annotations)}, "spec": {"unschedulable": True}}
        return self._patch_node(name, patch, STRATEGIC_MERGE_PATCH, f"annotate and cordon {name}")

    def add_taint(self, name: str, taint: Taint) -> Node:
        """Add (or update the value of) a taint; a no-op when it is already there as given."""

        def change(taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
            if any(t.same_slot(taint) and t.value == taint.value for t in taints):
                return taints  # already there (perhaps with a timeAdded the server gave it)
            return (*(t for t in taints if not t.same_slot(taint)), taint)

        return self._update_taints(name, change, f"taint node {name} with {taint.key}")

    def remove_taint(self, name: str, key: str, effect: str = "NoSchedule") -> Node:
        probe = Taint(key, "", effect)
        return self._update_taints(
            name,
            lambda taints: tuple(t for t in taints if not t.same_slot(probe)),
            f"untaint node {name} of {key}",
        )

    def _update_taints(self, name: str, change: Any, what: str) -> Node:
        """Read-modify-write guarded by resourceVersion, so a concurrent taint is never lost."""
        for attempt in range(CONFLICT_RETRIES):
            node = self.get_node(name)
            wanted = change(node.taints)
            if set(wanted) == set(node.taints):
                return node
            patch = {
                "metadata": {"resourceVersion": node.resource_version},
                "spec": {"taints": [t.to_json() for t in wanted] or None},
            }
            try:
                return self._patch_node(name, patch, MERGE_PATCH, what)
            except ConflictError:
                # Jittered, growing pause: racing writers (and the kubelet's status updates)
                # would otherwise collide again in lockstep.
                pause = random.uniform(0, CONFLICT_BACKOFF * 2**attempt)
                log.info("%s: conflict, re-reading in %.3fs", what, pause)
                time.sleep(pause)
        raise ConflictError(f"{what}: still conflicting after {CONFLICT_RETRIES} attempts")

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> Node:
        """Set the given labels; a None value deletes that key."""
        patch = {"metadata": {"labels": dict(labels)}}
        return self._patch_node(name, patch, MERGE_PATCH, f"label node {name}")

    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> Node:
        """Set the given annotations; a None value deletes that key."""
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._patch_node(name, patch, MERGE_PATCH, f"annotate node {name}")

    # -- custom resources (Cluster API) ------------------------------------------------------

    @staticmethod
    def _custom_path(group_version: str, plural: str, namespace: str | None, name: str) -> str:
        where = f"/namespaces/{namespace}" if namespace else ""
        return f"/apis/{group_version}{where}/{plural}" + (f"/{name}" if name else "")

    def get_custom(self, group_version: str, plural: str, namespace: str, name: str) -> JSON:
        path = self._custom_path(group_version, plural, namespace, name)
        return self._call("GET", path, f"get {plural} {namespace}/{name}")

    def list_custom(
        self,
        group_version: str,
        plural: str,
        namespace: str | None = None,
        label_selector: str = "",
    ) -> list[JSON]:
        """All objects (in one namespace, or every namespace when None)."""
        query = [("labelSelector", label_selector)] if label_selector else []
        path = self._custom_path(group_version, plural, namespace, "")
        data = self._call("GET", path, f"list {plural}", query=query)
        return list(data.get("items") or ())

    def patch_custom(
        self, group_version: str, plural: str, namespace: str, name: str, patch: JSON
    ) -> JSON:
        """A JSON merge patch: custom resources take no strategic merge patch."""
        path = self._custom_path(group_version, plural, namespace, name)
        return self._call(
            "PATCH",
            path,
            f"patch {plural} {namespace}/{name}",
            body=patch,
            content_type=MERGE_PATCH,
        )

    def delete_custom(
        self, group_version: str, plural: str, namespace: str, name: str, uid: str | None = None
    ) -> None:
        """Delete; with `uid`, only that incarnation."""
        body: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        path = self._custom_path(group_version, plural, namespace, name)
        self._call("DELETE", path, f"delete {plural} {namespace}/{name}", body=body)

    # -- pods --------------------------------------------------------------------------------

    def list_pods_on_node(self, node: str) -> list[Pod]:
        data = self._call(
            "GET",
            "/api/v1/pods",
            f"list pods on {node}",
            query=[("fieldSelector", f"spec.nodeName={node}")],
        )
        return [Pod.from_json(item) for item in data.get("items") or ()]

    def list_pods_everywhere(self, label_selector: str) -> list[Pod]:
        """Pods of every namespace with this label (the rack view's gang jobs)."""
        data = self._call(
            "GET",
            "/api/v1/pods",
            f"list pods labelled {label_selector}",
            query=[("labelSelector", label_selector)],
        )
        return [Pod.from_json(item) for item in data.get("items") or ()]

    def list_pods_versioned(
        self,
        label_selector: str,
        convert: Callable[[JSON], _T | None],
        page_size: int = LIST_PAGE_SIZE,
    ) -> tuple[list[_T], str]:
        """Every pod of every namespace with this label, each `convert`ed (None: dropped) as its
        page arrives, and the list's resourceVersion a watch picks up from. 10,000 agent pods'
        JSON held at once kept the controller's RSS ~110 MB higher for good."""
        pods: list[_T] = []
        token = ""
        while True:
            query = [("labelSelector", label_selector), ("limit", str(page_size))]
            if token:
                query.append(("continue", token))
            what = f"list pods labelled {label_selector}"
            data = self._call("GET", "/api/v1/pods", what, query=query)
            pods.extend(c for item in data.get("items") or () if (c := convert(item)) is not None)
            meta = data.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return pods, str(meta.get("resourceVersion") or "")

    def watch_pods(
        self, resource_version: str, label_selector: str, timeout_seconds: int = 300
    ) -> WatchStream:
        """Open a watch on the pods with this label (every namespace) after `resource_version`;
        as `watch_nodes`."""
        what = f"watch pods labelled {label_selector}"
        stream = self._open_watch(
            "/api/v1/pods", resource_version, timeout_seconds, what, label_selector
        )
        return WatchStream(stream, what)

    def list_pods(self, namespace: str, label_selector: str | None = None) -> list[Pod]:
        query = [("labelSelector", label_selector)] if label_selector else []
        data = self._call(
            "GET", f"/api/v1/namespaces/{namespace}/pods", f"list pods in {namespace}", query=query
        )
        return [Pod.from_json(item) for item in data.get("items") or ()]

    def set_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> Pod:
        raw = self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            f"annotate pod {namespace}/{name}",
            body={"metadata": {"annotations": dict(annotations)}},
            content_type=MERGE_PATCH,
        )
        return Pod.from_json(raw)

    def evict_pod(
        self, namespace: str, name: str, grace_seconds: int | None, uid: str | None = None
    ) -> EvictionOutcome:
        """POST a policy/v1 Eviction; refusals are outcomes, not exceptions, so that a drain can
        carry on with the other pods. A 404 means gone only when a fresh read agrees (no pod of
        that name, or another incarnation of it: `uid`)."""
        body: JSON = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if grace_seconds is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_seconds}
        what = f"evict pod {namespace}/{name}"
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        try:
            self._send("POST", path, None, body, None)
        except ApiException as exc:
            outcome = classify_eviction_error(exc.status or 0, exc.body, _retry_after(exc))
            if outcome.result is EvictionResult.NOT_FOUND:
                return self._confirm_gone(namespace, name, uid, outcome)
            return outcome
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            return EvictionOutcome(
                EvictionResult.API_UNAVAILABLE,
                f"{what}: {type(exc).__name__}: {exc}",
                UNAVAILABLE_DELAY,
            )
        return EvictionOutcome(EvictionResult.EVICTED)

    def _confirm_gone(
        self, namespace: str, name: str, uid: str | None, refused: EvictionOutcome
    ) -> EvictionOutcome:
        try:
            pod = self.get_pod(namespace, name)
        except NotFoundError:
            return refused
        except TransientError as exc:
            return EvictionOutcome(EvictionResult.API_UNAVAILABLE, str(exc), exc.delay)
        if uid and pod.uid != uid:
            return refused  # the name belongs to a new incarnation; ours is gone
        return EvictionOutcome(
            EvictionResult.ERROR, f"eviction answered 404 but pod {namespace}/{name} still exists"
        )

    def get_pod(self, namespace: str, name: str) -> Pod:
        raw = self._call(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{name}", f"get pod {namespace}/{name}"
        )
        return Pod.from_json(raw)

    def delete_pod(
        self, namespace: str, name: str, grace_seconds: int | None, uid: str | None = None
    ) -> None:
        """Graceful delete; with `uid`, only that incarnation (a recreated pod is left alone)."""
        body: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        if uid:
            body["preconditions"] = {"uid": uid}
        self._call(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            f"delete pod {namespace}/{name}",
            body=body,
        )

    # -- disruption budgets ------------------------------------------------------------------

    def list_pdbs(self, namespace: str) -> list[PodDisruptionBudget]:
        """The policy/v1 PodDisruptionBudgets of one namespace, status included."""
        data = self._call(
            "GET",
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
            f"list poddisruptionbudgets in {namespace}",
        )
        return [PodDisruptionBudget.from_json(item) for item in data.get("items") or ()]

    # -- events ------------------------------------------------------------------------------

    def create_event(
        self, about: ObjectRef, reason: str, message: str, type_: str = "Normal"
    ) -> None:
        """A core/v1 Event, as `kubectl describe` and `kubectl get events` show them. Events of
        cluster-scoped objects (nodes) live in "default", as the kubelet's do."""
        now = self._clock.now()
        namespace = about.namespace or "default"
        involved: JSON = {"kind": about.kind, "name": about.name, "apiVersion": about.api_version}
        if about.namespace:
            involved["namespace"] = about.namespace
        if about.uid:
            involved["uid"] = about.uid
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{about.name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "firstTimestamp": format_time(now),
            "lastTimestamp": format_time(now),
            "count": 1,
        }
        self._call("POST", f"/api/v1/namespaces/{namespace}/events", f"event {reason}", body=body)

    # -- jobs --------------------------------------------------------------------------------

    def get_job(self, namespace: str, name: str) -> JSON | None:
        try:
            return self._call(
                "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}", f"get job {name}"
            )
        except NotFoundError:
            return None

    def create_job(self, namespace: str, job: JSON) -> JSON:
        """Create the Job, or return the one of that name already there (a retried step)."""
        name = str((job.get("metadata") or {}).get("name", ""))
        try:
            path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
            return self._call("POST", path, f"create job {name}", body=job)
        except ConflictError:
            existing = self.get_job(namespace, name)
            if existing is None:
                raise
            return existing

    def read_pod_log(self, namespace: str, name: str) -> str:
        what = f"log of pod {namespace}/{name}"
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        try:
            data = self._send("GET", path, None, None, None)
        except ApiException as exc:
            raise wrap_api_exception(exc, what) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from exc
        return data.decode("utf-8", errors="replace")

    # -- what this client may do (remediator doctor) -----------------------------------------

    def server_version(self) -> JSON:
        return self._call("GET", "/version", "server version")

    def access_review(
        self, verb: str, group: str, resource: str, namespace: str = "", name: str = ""
    ) -> tuple[bool, str]:
        """A SelfSubjectAccessReview (`resource` may be `pods/eviction`): whether this client's
        own identity may, and the authorizer's reason. It asks; it creates nothing."""
        base, _, sub = resource.partition("/")
        attributes = {
            "verb": verb,
            "group": group,
            "resource": base,
            **({"subresource": sub} if sub else {}),
            **({"namespace": namespace} if namespace else {}),
            **({"name": name} if name else {}),
        }
        body: JSON = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        data = self._call("POST", path, f"access review {verb} {resource}", body=body)
        status = data.get("status") or {}
        reason = status.get("reason") or status.get("evaluationError") or ""
        return bool(status.get("allowed")), str(reason)

    # -- leases ------------------------------------------------------------------------------

    def _lease_path(self, namespace: str, name: str = "") -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return f"{base}/{name}" if name else base

    def get_lease(self, namespace: str, name: str, timeout: float | None = None) -> Lease:
        raw = self._call(
            "GET", self._lease_path(namespace, name), f"get lease {name}", timeout=timeout
        )
        return Lease.from_json(raw)

    def create_lease(self, lease: Lease, timeout: float | None = None) -> Lease:
        raw = self._call(
            "POST",
            self._lease_path(lease.namespace),
            f"create lease {lease.name}",
            body=lease.to_json(),
            timeout=timeout,
        )
        return Lease.from_json(raw)

    def replace_lease(self, lease: Lease, timeout: float | None = None) -> Lease:
        """PUT guarded by the lease's resourceVersion: a 409 means someone else wrote first."""
        raw = self._call(
            "PUT",
            self._lease_path(lease.namespace, lease.name),
            f"update lease {lease.name}",
            body=lease.to_json(),
            timeout=timeout,
        )
        return Lease.from_json(raw)


def _watch_events(chunks: Iterator[bytes], what: str) -> Iterator[JSON]:
    """Newline-delimited JSON events out of a chunked body (a line may span chunks)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as exc:
                raise TransientError(f"{what}: an event is not JSON") from exc
            if not isinstance(event, dict):
                continue
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise ResourceExpired(f"{what}: {status.get('message', '410 Gone')}")
                raise TransientError(f"{what}: {status.get('message', 'watch error')}")
            yield event


class WatchStream:
    """One open watch: its events as parsed JSON, and a close() another thread may call."""

    def __init__(self, raw: urllib3.BaseHTTPResponse, what: str) -> None:
        self._raw = raw
        self._what = what

    def events(self) -> Iterator[JSON]:
        try:
            for line in self._raw:
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise TransientError(f"{self._what}: an event is not JSON") from exc
                if not isinstance(event, dict):
                    continue
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    text = f"{self._what}: {status.get('code')} {status.get('message', '')}"
                    if status.get("code") == 410:
                        raise ResourceExpired(text, delay=0.0)
                    raise TransientError(text)
                yield event
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise TransientError(f"{self._what}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.close()

    def close(self) -> None:
        """Unblock a reader in another thread (shutdown), then give the connection back."""
        with contextlib.suppress(ValueError, RuntimeError, OSError):  # ended: nothing to shut
            self._raw.shutdown()
        try:
            self._raw.release_conn()
        except (urllib3.exceptions.HTTPError, OSError):
            return


def classify_eviction_error(
    status: int, body: str | None, retry_after: float | None
) -> EvictionOutcome:
    """What a refused eviction means, from its status code and Status body."""
    message, parsed = _status_message(body)
    causes = (parsed.get("details") or {}).get("causes") or []
    cause_text = "; ".join(str(c.get("message", "")) for c in causes if isinstance(c, dict))
    full = f"{message} ({cause_text})" if cause_text else message
    if status == 404:
        return EvictionOutcome(EvictionResult.NOT_FOUND, full)
    if status == 429:
        pdb = (
            any(isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes)
            or "disruption budget" in message.lower()
        )
        if pdb:
            return EvictionOutcome(EvictionResult.BLOCKED_BY_PDB, full, retry_after)
        return EvictionOutcome(
            EvictionResult.API_UNAVAILABLE,
            f"429 {full or 'too many requests'}",
            retry_after or UNAVAILABLE_DELAY,
        )
    if status == 500 and "more than one poddisruptionbudget" in message.lower():
        return EvictionOutcome(EvictionResult.MULTIPLE_PDBS, full)
    if unavailable(status):
        return EvictionOutcome(
            EvictionResult.API_UNAVAILABLE,
            f"{status} {full}".strip(),
            retry_after or UNAVAILABLE_DELAY,
        )
    return EvictionOutcome(EvictionResult.ERROR, f"{status} {full}".strip(), retry_after)
