"""The generic HTTP node-pool provider (contract: docs/nodepool-api.yaml).

Retries 5xx, 429 and connection failures with exponential backoff and full jitter, within a
bounded total time; a POST is safe to retry because it carries the Idempotency-Key. A Retry-After
is honoured however long: a short one is waited here, a longer one (beyond the backoff cap or the
time left) ends the call at once with a TransientError whose delay is the Retry-After, so the
engine schedules the next attempt then instead of a thread sleeping. Everything else becomes one
of remediator.errors at this edge.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx

from remediator.clock import utcnow
from remediator.errors import NotFoundError, PermanentError, TransientError
from remediator.providers.base import (
    CapacityExhausted,
    Operation,
    OperationState,
    RebootReceipt,
    RebootUnsupported,
)
from remediator.settings import ProviderSettings

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After as delay-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - utcnow()).total_seconds())


def backoff_delay(attempt: int, base: float, cap: float, rand: Callable[[], float]) -> float:
    """Full jitter: uniform in [0, min(cap, base·2^attempt)], which spreads a thundering herd."""
    return rand() * min(cap, base * (2**attempt))


def parse_operation(data: object) -> Operation:
    """An Operation from the API's JSON; anything malformed is a PermanentError."""
    if not isinstance(data, Mapping):
        raise PermanentError(f"node-pool API: operation is not an object: {data!r:.200}")
    try:
        state = OperationState(str(data["state"]))
        error = data.get("error")
        error_text = None
        if isinstance(error, Mapping):
            error_text = f"{error.get('code', 'error')}: {error.get('message', '')}"
        elif error is not None:
            error_text = str(error)
        new_node = data.get("new_node")
        return Operation(
            id=str(data["id"]),
            pool=str(data["pool"]),
            node=str(data["node"]),
            state=state,
            new_node=str(new_node) if new_node else None,
            error=error_text,
        )
    except (KeyError, ValueError) as exc:
        raise PermanentError(f"node-pool API: malformed operation ({exc}): {data!r:.200}") from exc


def _error_body(response: httpx.Response) -> tuple[str, str]:
    try:
        err = response.json().get("error") or {}
        return str(err.get("code", "")), str(err.get("message", ""))
    except (ValueError, AttributeError):
        return "", response.text[:200]


class HttpNodePoolProvider:
    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 5,
        max_total_seconds: float = 30.0,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            # Found now, at startup: at request time it would look like an outage, retried forever.
            raise PermanentError(
                f"node-pool API URL {base_url!r} is not an http:// or https:// URL with a host"
            )
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            transport=transport,
        )
        self._max_retries = max_retries
        self._max_total = max_total_seconds
        self._base = backoff_base
        self._cap = backoff_cap
        self._sleep = sleep
        self._monotonic = monotonic
        self._rand = rand

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> HttpNodePoolProvider:
        return cls(
            settings.url,
            token=settings.token.get_secret_value() if settings.token else None,
            timeout=settings.timeout_seconds,
            max_retries=settings.max_retries,
        )

    def close(self) -> None:
        self._http.close()

    # -- the protocol ------------------------------------------------------------------------

    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        response = self._request(
            "POST",
            f"/v1/pools/{quote(pool, safe='')}/replacements",
            f"replace {node} in {pool}",
            json={"node": node, "reason": reason},
            headers={"Idempotency-Key": idempotency_key},
            pool=pool,
        )
        return parse_operation(self._json(response))

    def get_operation(self, op_id: str) -> Operation:
        response = self._request(
            "GET", f"/v1/operations/{quote(op_id, safe='')}", f"operation {op_id}"
        )
        return parse_operation(self._json(response))

    def spare_capacity(self, pool: str) -> int | None:
        response = self._request(
            "GET", f"/v1/pools/{quote(pool, safe='')}/capacity", f"capacity of {pool}"
        )
        data = self._json(response)
        value = data.get("spare_capacity") if isinstance(data, Mapping) else None
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise PermanentError(f"node-pool API: spare_capacity is not an integer: {value!r}")
        return value

    def reboot(self, pool: str, node: str, idempotency_key: str, reason: str) -> RebootReceipt:
        path = f"/v1/pools/{quote(pool, safe='')}/reboots"
        try:
            response = self._request(
                "POST",
                path,
                f"reboot {node} in {pool}",
                json={"node": node, "reason": reason},
                headers={"Idempotency-Key": idempotency_key},
                pool=pool,
            )
        except NotFoundError as exc:
            if " 404 not_found:" in str(exc):
                # The server does not know the path: an API without the reboot call.
                raise RebootUnsupported(f"node-pool API has no reboot call: {exc}") from exc
            raise
        data = self._json(response)
        if not isinstance(data, Mapping) or "id" not in data:
            raise PermanentError(f"node-pool API: malformed reboot answer: {data!r:.200}")
        return RebootReceipt(
            str(data["id"]), str(data.get("pool", pool)), str(data.get("node", node))
        )

    def request_rack_operation(
        self, pool: str, rack: str, action: str, idempotency_key: str, reason: str
    ) -> Operation:
        path = f"/v1/pools/{quote(pool, safe='')}/racks/{quote(rack, safe='')}/{action}"
        response = self._request(
            "POST",
            path,
            f"{action} rack {rack} in {pool}",
            json={"reason": reason},
            headers={"Idempotency-Key": idempotency_key},
            pool=pool,
        )
        return parse_operation(self._json(response))

    # -- transport ---------------------------------------------------------------------------

    @staticmethod
    def _json(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise PermanentError(
                f"node-pool API: {response.request.method} {response.request.url.path}: "
                f"response is not JSON: {response.text[:200]!r}"
            ) from exc

    def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        pool: str = "",
    ) -> httpx.Response:
        started = self._monotonic()
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                response = self._http.request(method, path, json=json, headers=headers)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return response
                if response.status_code not in RETRYABLE_STATUS:
                    raise self._client_error(response, what, pool)
                code, message = _error_body(response)
                problem = f"{response.status_code} {code} {message}".strip()
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
            delay = (
                retry_after
                if retry_after is not None
                else backoff_delay(attempt, self._base, self._cap, self._rand)
            )
            elapsed = self._monotonic() - started
            if retry_after is not None and (
                retry_after > self._cap or elapsed + retry_after > self._max_total
            ):
                raise TransientError(
                    f"node-pool API: {what}: {problem} (asked to retry after {retry_after:g}s)",
                    delay=retry_after,
                )
            if attempt >= self._max_retries or elapsed + delay > self._max_total:
                raise TransientError(
                    f"node-pool API: {what}: {problem} (gave up after {attempt + 1} attempts)",
                    delay=max(delay, 1.0),
                )
            log.warning("node-pool API: %s: %s; retrying in %.2fs", what, problem, delay)
            self._sleep(delay)
            attempt += 1

    @staticmethod
    def _client_error(response: httpx.Response, what: str, pool: str) -> Exception:
        code, message = _error_body(response)
        text = f"node-pool API: {what}: {response.status_code} {code}: {message}"
        if response.status_code == 409 and code == "capacity_exhausted":
            return CapacityExhausted(pool, message)
        if response.status_code == 404:
            return NotFoundError(text)
        return PermanentError(text)
