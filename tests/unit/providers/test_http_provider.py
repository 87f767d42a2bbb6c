"""The HTTP provider's error paths, with respx standing in for the node-pool API and a fake
clock for the backoff, so that they run instantly."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
import respx
from pydantic import SecretStr

from remediator.errors import NotFoundError, PermanentError, TransientError
from remediator.providers.base import CapacityExhausted, OperationState
from remediator.providers.http import HttpNodePoolProvider, backoff_delay, parse_retry_after
from remediator.settings import ProviderSettings

BASE = "http://nodepool.test"
OP = {
    "id": "op-1",
    "pool": "pool-a",
    "node": "gpu-1",
    "state": "pending",
    "new_node": None,
    "error": None,
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
}


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE, assert_all_called=False) as router:
        yield router


def provider(fake_time: FakeTime, **kwargs: object) -> HttpNodePoolProvider:
    options: dict[str, object] = {
        "sleep": fake_time.sleep,
        "monotonic": fake_time.monotonic,
        "rand": lambda: 1.0,
        "max_retries": 4,
        "max_total_seconds": 30.0,
    }
    options.update(kwargs)
    return HttpNodePoolProvider(BASE, **options)  # type: ignore[arg-type]


def test_request_sends_key_reason_and_token(api: respx.MockRouter, fake_time: FakeTime) -> None:
    route = api.post("/v1/pools/pool-a/replacements").mock(
        return_value=httpx.Response(202, json=OP)
    )
    op = provider(fake_time, token="s3cret").request_replacement(
        "pool-a", "gpu-1", "rem-1", "xid 79"
    )
    assert op.id == "op-1" and op.state is OperationState.PENDING and op.new_node is None
    sent = route.calls.last.request
    assert sent.headers["Idempotency-Key"] == "rem-1"
    assert sent.headers["Authorization"] == "Bearer s3cret"
    assert json.loads(sent.content) == {"node": "gpu-1", "reason": "xid 79"}


def test_5xx_then_success_backs_off_exponentially(
    api: respx.MockRouter, fake_time: FakeTime
) -> None:
    api.get("/v1/operations/op-1").mock(
        side_effect=[
            httpx.Response(503, json={"error": {"code": "unavailable", "message": "busy"}}),
            httpx.Response(502, text="bad gateway"),
            httpx.Response(200, json={**OP, "state": "succeeded", "new_node": "gpu-9"}),
        ]
    )
    op = provider(fake_time).get_operation("op-1")
    assert op.state is OperationState.SUCCEEDED and op.new_node == "gpu-9"
    assert fake_time.sleeps == [0.5, 1.0]


def test_429_retry_after_is_honoured(api: respx.MockRouter, fake_time: FakeTime) -> None:
    api.get("/v1/pools/pool-a/capacity").mock(
        side_effect=[
            httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {"code": "rate"}}),
            httpx.Response(200, json={"pool": "pool-a", "spare_capacity": 3}),
        ]
    )
    assert provider(fake_time).spare_capacity("pool-a") == 3
    assert fake_time.sleeps == [7.0]


def test_retry_after_past_the_budget_gives_up_at_once(
    api: respx.MockRouter, fake_time: FakeTime
) -> None:
    api.get("/v1/pools/pool-a/capacity").mock(
        return_value=httpx.Response(429, headers={"Retry-After": "120"})
    )
    with pytest.raises(TransientError) as caught:
        provider(fake_time).spare_capacity("pool-a")
    assert caught.value.delay == 120.0 and fake_time.sleeps == []


def test_timeouts_are_retried_then_reported(api: respx.MockRouter, fake_time: FakeTime) -> None:
    route = api.get("/v1/operations/op-1").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(TransientError, match="ReadTimeout"):
        provider(fake_time, max_retries=3).get_operation("op-1")
    assert route.call_count == 4
    assert fake_time.sleeps == [0.5, 1.0, 2.0]


def test_total_time_is_bounded(api: respx.MockRouter, fake_time: FakeTime) -> None:
    api.get("/v1/operations/op-1").mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(TransientError, match="ConnectError"):
        provider(fake_time, max_retries=100, max_total_seconds=10.0).get_operation("op-1")
    assert sum(fake_time.sleeps) <= 10.0
    assert fake_time.sleeps == [0.5, 1.0, 2.0, 4.0]


def test_capacity_exhausted_is_distinct(api: respx.MockRouter, fake_time: FakeTime) -> None:
    api.post("/v1/pools/pool-a/replacements").mock(
        return_value=httpx.Response(
            409,
            json={"error": {"code": "capacity_exhausted", "message": "0 of 4 spare nodes left"}},
        )
    )
    with pytest.raises(CapacityExhausted) as caught:
        provider(fake_time).request_replacement("pool-a", "gpu-1", "k", "r")
    assert isinstance(caught.value, PermanentError)
    assert "'pool-a' has no spare capacity" in str(caught.value)
    assert "0 of 4 spare nodes left" in str(caught.value)
    assert fake_time.sleeps == []


def test_other_client_errors_are_permanent(api: respx.MockRouter, fake_time: FakeTime) -> None:
    api.get("/v1/operations/nope").mock(
        return_value=httpx.Response(404, json={"error": {"code": "not_found", "message": "no op"}})
    )
    api.post("/v1/pools/pool-a/replacements").mock(
        return_value=httpx.Response(
            400, json={"error": {"code": "missing_idempotency_key", "message": "required"}}
        )
    )
    with pytest.raises(NotFoundError, match="no op"):
        provider(fake_time).get_operation("nope")
    with pytest.raises(PermanentError, match="missing_idempotency_key"):
        provider(fake_time).request_replacement("pool-a", "gpu-1", "k", "r")


@pytest.mark.parametrize(
    "body",
    [
        b"<html>oops</html>",
        json.dumps({"id": "op-1"}).encode(),
        json.dumps({**OP, "state": "exploded"}).encode(),
        json.dumps([OP]).encode(),
    ],
)
def test_malformed_bodies_are_permanent(
    api: respx.MockRouter, fake_time: FakeTime, body: bytes
) -> None:
    api.get("/v1/operations/op-1").mock(return_value=httpx.Response(200, content=body))
    with pytest.raises(PermanentError, match="node-pool API"):
        provider(fake_time).get_operation("op-1")


def test_malformed_capacity(api: respx.MockRouter, fake_time: FakeTime) -> None:
    api.get("/v1/pools/a/capacity").mock(
        side_effect=[
            httpx.Response(200, json={"pool": "a", "spare_capacity": "many"}),
            httpx.Response(200, json={"pool": "a", "spare_capacity": None}),
        ]
    )
    with pytest.raises(PermanentError, match="not an integer"):
        provider(fake_time).spare_capacity("a")
    assert provider(fake_time).spare_capacity("a") is None


def test_failed_operation_error_text(api: respx.MockRouter, fake_time: FakeTime) -> None:
    failed = {**OP, "state": "failed", "error": {"code": "boot_failed", "message": "no POST"}}
    api.get("/v1/operations/op-1").mock(return_value=httpx.Response(200, json=failed))
    assert provider(fake_time).get_operation("op-1").error == "boot_failed: no POST"


def test_helpers() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert backoff_delay(10, 0.5, 8.0, lambda: 1.0) == 8.0
    assert backoff_delay(2, 0.5, 8.0, lambda: 0.5) == 1.0


def test_from_settings_carries_url_token_and_timeout(api: respx.MockRouter) -> None:
    route = api.get("/v1/pools/a/capacity").mock(
        return_value=httpx.Response(200, json={"pool": "a", "spare_capacity": 1})
    )
    settings = ProviderSettings(url=BASE + "/", token=SecretStr("tok"), timeout_seconds=3.0)
    assert HttpNodePoolProvider.from_settings(settings).spare_capacity("a") == 1
    assert route.calls.last.request.headers["Authorization"] == "Bearer tok"


@pytest.mark.parametrize("url", ["nodepool.internal:8080", "ftp://pools", "", "http://"])
def test_a_url_that_cannot_work_is_refused_at_startup(url: str) -> None:
    with pytest.raises(PermanentError, match="not an http:// or https:// URL"):
        HttpNodePoolProvider.from_settings(ProviderSettings(url=url))


def test_a_60s_retry_after_is_handed_on_whole_without_sleeping(
    api: respx.MockRouter, fake_time: FakeTime
) -> None:
    """Problem 12: a 60 s Retry-After was retried after 32 s. The client does not sleep on it
    (a thread would be held for a minute); the engine schedules the next attempt at 60 s."""
    api.post("/v1/pools/pool-a/replacements").mock(
        return_value=httpx.Response(503, headers={"Retry-After": "60"}, json={"error": {}})
    )
    with pytest.raises(TransientError) as caught:
        provider(fake_time, max_total_seconds=600.0).request_replacement("pool-a", "n1", "k", "r")
    assert caught.value.delay == 60.0 and fake_time.sleeps == []
    assert "retry after 60s" in str(caught.value)


def test_a_capacity_hold_says_it_once(api: respx.MockRouter, fake_time: FakeTime) -> None:
    """The platform's own message already says the pool has no spare capacity: the hold
    reason is that message, not ours with it appended."""
    message = (
        'node pool "pool-a" has no spare capacity: cannot replace node gpu-1 now; '
        "retry later or free capacity in the pool"
    )
    api.post("/v1/pools/pool-a/replacements").mock(
        return_value=httpx.Response(
            409, json={"error": {"code": "capacity_exhausted", "message": message}}
        )
    )
    with pytest.raises(CapacityExhausted) as caught:
        provider(fake_time).request_replacement("pool-a", "gpu-1", "k", "r")
    assert str(caught.value).count("spare capacity") == 1, str(caught.value)
    assert "gpu-1" in str(caught.value) and "pool-a" in str(caught.value)
