"""The Prometheus source's pure part, and its failure paths against a loopback HTTP server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError

from remediator.signals.interest import Interest, ReadingFilter
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.prometheus import (
    PrometheusQueries,
    PrometheusSource,
    PrometheusSourceConfig,
    checked_signal,
    to_readings,
    to_signals,
)
from tests.fixtures.prometheus import free_port

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = PrometheusSourceConfig(url="http://127.0.0.1:1")
GPU = {
    "gpu": "3",
    "UUID": "GPU-5f0c1e9a-0000-4000-8000-000000000003",
    "pci_bus_id": "00000000:5D:00.0",
    "device": "nvidia3",
    "modelName": "NVIDIA H100 80GB HBM3",
    "Hostname": "gpu-node-4",
}


def series(labels: dict[str, str], value: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1767225600.0, value]}


def test_xid_value_is_the_code() -> None:
    labels = {"__name__": "DCGM_FI_DEV_XID_ERRORS", **GPU, "err_code": "79", "err_msg": "x"}
    (signal,), skipped = to_signals(
        SignalKind.XID, [series(labels, "79")], CONFIG, "prometheus", NOW
    )
    assert skipped == 0
    assert (signal.node, signal.gpu, signal.code, signal.value) == ("gpu-node-4", 3, 79, None)
    assert signal.gpu_uuid == GPU["UUID"]
    assert "__name__" not in signal.labels and signal.labels["err_code"] == "79"


def test_thermal_reading_keeps_the_value_and_accepts_lowercase_hostname() -> None:
    labels = {k: v for k, v in GPU.items() if k != "Hostname"} | {"hostname": "gpu-node-9"}
    (signal,), _ = to_signals(SignalKind.THERMAL, [series(labels, "81")], CONFIG, "p", NOW)
    assert (signal.node, signal.kind, signal.code, signal.value) == (
        "gpu-node-9",
        SignalKind.THERMAL,
        None,
        81.0,
    )


def test_infiniband_uses_the_node_label_and_problem_code() -> None:
    labels = {"device": "mlx5_2", "port": "1", "node": "gpu-node-1", "problem": "link_down"}
    other = {**labels, "problem": "symbol_errors"}
    down, symbols = to_signals(
        SignalKind.INFINIBAND, [series(labels, "1"), series(other, "240")], CONFIG, "p", NOW
    )[0]
    assert (down.node, down.gpu, down.code, down.value) == ("gpu-node-1", None, 1, 1.0)
    assert (symbols.code, symbols.value) == (3, 240.0)


def test_ecc_problem_codes_tell_new_errors_from_the_lifetime_count() -> None:
    gpu = {k: GPU[k] for k in ("Hostname", "gpu", "UUID")}
    answer = [series({**gpu, "problem": "dbe_volatile"}, "1"), series({**gpu, "problem": "x"}, "3")]
    new, unknown = to_signals(SignalKind.ECC, answer, CONFIG, "p", NOW)[0]
    assert (new.kind, new.gpu, new.code, new.value) == (SignalKind.ECC, 3, 1, 1.0)
    assert unknown.code is None  # an unmapped problem keeps no code rather than a wrong one


def test_ib_node_label_is_configurable() -> None:
    config = CONFIG.model_copy(update={"ib_node_label": "kubernetes_node"})
    labels = {"device": "mlx5_0", "kubernetes_node": "n7", "instance": "10.0.0.7:9100"}
    (signal,), _ = to_signals(SignalKind.INFINIBAND, [series(labels, "1")], config, "p", NOW)
    assert signal.node == "n7"


def test_series_without_node_or_value_are_skipped_not_invented() -> None:
    no_node = {k: v for k, v in GPU.items() if k != "Hostname"}
    answer = [
        series(no_node, "70"),
        series(GPU, "NaN"),
        series(GPU, "+Inf"),
        {"metric": GPU},
        series({**GPU, "gpu": "5000"}, "60"),  # beyond any GPU index: not a real GPU
        series({**GPU, "Hostname": "x" * 300}, "60"),  # not a Kubernetes node name
        series(GPU, "64"),
    ]
    found, skipped = to_signals(SignalKind.THERMAL, answer, CONFIG, "p", NOW)
    assert [s.value for s in found] == [64.0]
    assert skipped == 6


def test_windows_can_be_shortened() -> None:
    queries = PrometheusQueries.with_windows(counters="30s", missing="20s", symbol_errors="2m")
    assert queries.nvlink is not None and "[30s]" in queries.nvlink
    assert queries.gpu_missing is not None and "offset 20s" in queries.gpu_missing
    assert queries.infiniband is not None and "[2m]" in queries.infiniband
    assert "[1h]" not in queries.infiniband and "[5m]" not in queries.infiniband
    assert queries.xid == PrometheusQueries().xid


# -- failure paths against a real HTTP server ---------------------------------------------------

Handler = Callable[[BaseHTTPRequestHandler], None]


@pytest.fixture
def fake_prometheus() -> Iterator[Callable[[Handler], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Handler) -> str:
        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def reply(status: int, body: Any) -> Handler:
    def handle(request: BaseHTTPRequestHandler) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    return handle


def vector(*results: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(results)}}


def source(url: str, **overrides: Any) -> PrometheusSource:
    return PrometheusSource(PrometheusSourceConfig(url=url, **overrides))


def test_unreachable_prometheus_is_down_not_healthy() -> None:
    result = source(f"http://127.0.0.1:{free_port()}", retries=0).poll(NOW)
    assert result.signals == ()
    assert not result.health.up
    assert result.health.error is not None and "unreachable" in result.health.error
    assert result.health.last_success_at is None


def test_server_errors_are_down_with_the_status(fake_prometheus: Any) -> None:
    url = fake_prometheus(reply(503, {"status": "error", "error": "overloaded"}))
    result = source(url, retries=0).poll(NOW)
    assert not result.health.up and result.signals == ()
    assert "freshness" in (result.health.error or "")


def test_bad_query_is_down_naming_the_query(fake_prometheus: Any) -> None:
    def handle(request: BaseHTTPRequestHandler) -> None:
        if "time%28%29" in request.path:  # the freshness query
            reply(200, vector(series({}, "3")))(request)
        else:
            reply(400, {"status": "error", "errorType": "bad_data", "error": "parse error"})(
                request
            )

    result = source(fake_prometheus(handle)).poll(NOW)
    assert not result.health.up
    assert (result.health.error or "").startswith("xid query failed")
    assert "parse error" in (result.health.error or "")


@pytest.mark.parametrize(
    "body",
    [
        b"<html>not json</html>",
        {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}},
    ],
)
def test_malformed_answers_are_down(fake_prometheus: Any, body: Any) -> None:
    result = source(fake_prometheus(reply(200, body))).poll(NOW)
    assert not result.health.up and result.signals == ()


def test_no_exporter_data_is_down(fake_prometheus: Any) -> None:
    result = source(fake_prometheus(reply(200, vector()))).poll(NOW)
    assert not result.health.up
    assert "no dcgm samples" in (result.health.error or "")


def test_stale_exporter_data_is_down(fake_prometheus: Any) -> None:
    result = source(fake_prometheus(reply(200, vector(series({}, "600")))), staleness_seconds=120)
    polled = result.poll(NOW)
    assert not polled.health.up
    assert "stale" in (polled.health.error or "") and "600s" in (polled.health.error or "")


def test_every_freshness_check_must_pass(fake_prometheus: Any) -> None:
    def handle(request: BaseHTTPRequestHandler) -> None:
        if "node_infiniband_state_id" in request.path:  # node_exporter went quiet
            reply(200, vector(series({}, "900")))(request)
        else:
            reply(200, vector(series({}, "1")))(request)

    freshness = {
        "dcgm": "time() - max(timestamp(DCGM_FI_DEV_GPU_TEMP))",
        "infiniband": "time() - max(timestamp(node_infiniband_state_id))",
    }
    result = source(fake_prometheus(handle), freshness=freshness).poll(NOW)
    assert not result.health.up
    assert (result.health.error or "").startswith("infiniband data is stale")
    assert result.health.detail == {
        "dcgm_newest_sample_age_seconds": "1.0",
        "infiniband_newest_sample_age_seconds": "900.0",
    }


def test_slow_prometheus_is_bounded_by_the_poll_timeout(fake_prometheus: Any) -> None:
    def slow(request: BaseHTTPRequestHandler) -> None:
        time.sleep(3)
        reply(200, vector(series({}, "1")))(request)

    result = source(fake_prometheus(slow), timeout_seconds=0.5, retries=2).poll(NOW)
    assert not result.health.up
    assert "Timeout" in (result.health.error or "")


def test_healthy_answer_and_last_success(fake_prometheus: Any) -> None:
    def handle(request: BaseHTTPRequestHandler) -> None:
        if "time%28%29" in request.path:
            reply(200, vector(series({}, "2.5")))(request)
        elif "DCGM_FI_DEV_GPU_TEMP" in request.path and "offset" not in request.path:
            reply(200, vector(series(GPU, "55")))(request)
        else:
            reply(200, vector())(request)

    prom = source(fake_prometheus(handle))
    result = prom.poll(NOW)
    assert result.health.up and result.health.error is None
    assert result.health.last_success_at == NOW
    assert [(s.kind, s.value) for s in result.signals] == [(SignalKind.THERMAL, 55.0)]
    assert result.health.detail["dcgm_newest_sample_age_seconds"] == "2.5"


def test_one_query_per_kind_per_poll_whatever_the_fleet_size(fake_prometheus: Any) -> None:
    paths: list[str] = []
    fleet = [
        series({**GPU, "Hostname": f"node-{n}", "gpu": str(g)}, "50")
        for n in range(300)
        for g in range(8)
    ]

    def handle(request: BaseHTTPRequestHandler) -> None:
        paths.append(request.path)
        if "time%28%29" in request.path:
            reply(200, vector(series({}, "1")))(request)
        elif "DCGM_FI_DEV_GPU_TEMP" in request.path and "offset" not in request.path:
            reply(200, vector(*fleet))(request)
        else:
            reply(200, vector())(request)

    result = source(fake_prometheus(handle)).poll(NOW)
    assert result.health.up and len(result.signals) == 2400
    kinds = [k for k in SignalKind if getattr(PrometheusQueries(), k.value, None) is not None]
    # Freshness, coverage (every kind's count and newest sample in one), one per kind.
    assert len(paths) == 2 + len(kinds) == 10


def test_a_disabled_kind_is_not_queried(fake_prometheus: Any) -> None:
    paths: list[str] = []

    def handle(request: BaseHTTPRequestHandler) -> None:
        paths.append(request.path)
        reply(200, vector(series({}, "1")))(request)

    queries = PrometheusQueries(infiniband=None, gpu_missing=None)
    source(fake_prometheus(handle), queries=queries).poll(NOW)
    assert len(paths) == 8


def test_every_kind_is_queried_at_the_freshness_answer_time(fake_prometheus: Any) -> None:
    """One poll is one snapshot: a scrape between two queries cannot split a fault in two."""
    queries: list[dict[str, list[str]]] = []

    def handle(request: BaseHTTPRequestHandler) -> None:
        queries.append(parse_qs(urlsplit(request.path).query))
        answer = {"metric": {}, "value": [1767225612.25, "1"]}
        reply(200, vector(answer))(request)

    source(fake_prometheus(handle)).poll(NOW)
    assert "time" not in queries[0]  # the freshness query: Prometheus' own now
    assert len(queries) == 10
    assert all(q["time"] == ["1767225612.250"] for q in queries[1:])


def test_out_of_range_numbers_are_refused_with_the_reason(fake_prometheus: Any) -> None:
    xid = {"__name__": "DCGM_FI_DEV_XID_ERRORS", **GPU}

    def handle(request: BaseHTTPRequestHandler) -> None:
        query = parse_qs(urlsplit(request.path).query)["query"][0]
        if query.startswith("time()"):
            reply(200, vector(series({}, "1")))(request)
        elif query.startswith("DCGM_FI_DEV_XID_ERRORS"):
            reply(200, vector(series(xid, "1e20"), series(xid | {"gpu": "4"}, "79")))(request)
        else:
            reply(200, vector())(request)

    result = source(fake_prometheus(handle)).poll(NOW)
    assert result.health.up
    assert [(s.gpu, s.code) for s in result.signals] == [(4, 79)]  # the rest of the batch
    assert result.health.detail["skipped_series"] == "1"
    assert "xid code 100000000000000000000 is outside 1..65535" in result.health.detail["refused"]


def test_a_reading_carries_its_sample_time_and_is_read_once() -> None:
    evaluated = 1767225700.0
    answer = [
        {"metric": {**GPU, "remediator_field": "value"}, "value": [evaluated, "81"]},
        {"metric": {**GPU, "remediator_field": "timestamp"}, "value": [evaluated, "1767225690"]},
        {"metric": {**GPU, "gpu": "5", "remediator_field": "value"}, "value": [evaluated, "90"]},
        {
            "metric": {**GPU, "gpu": "5", "remediator_field": "timestamp"},
            "value": [evaluated, "1767225600"],  # 100 s old: frozen, not a reading
        },
    ]
    args: dict[str, Any] = {"evaluated_at": evaluated, "max_age": 75.0}
    first, seen = to_readings(SignalKind.THERMAL, answer, CONFIG, "p", seen={}, **args)
    assert [(s.gpu, s.value) for s in first.signals] == [(3, 81.0)]
    assert first.signals[0].observed_at == datetime.fromtimestamp(1767225690, UTC)
    assert first.stale == 1
    again, _ = to_readings(SignalKind.THERMAL, answer, CONFIG, "p", seen=seen, **args)
    assert again.signals == [] and again.seen == 1  # the same sample does not come twice


def test_a_source_narrowed_to_the_policies_queries_only_their_kinds(fake_prometheus: Any) -> None:
    paths: list[str] = []

    def handle(request: BaseHTTPRequestHandler) -> None:
        paths.append(parse_qs(urlsplit(request.path).query)["query"][0])
        reply(200, vector(series({}, "1")))(request)

    narrowed = ReadingFilter(at_least=75.0, at_most=None, recent=timedelta(minutes=3))
    prom = source(fake_prometheus(handle))
    prom.set_interest(Interest(frozenset({SignalKind.THERMAL}), {SignalKind.THERMAL: narrowed}))
    prom.poll(NOW)
    freshness, coverage, thermal = paths
    assert freshness.startswith("time()")
    assert "count(DCGM_FI_DEV_GPU_TEMP)" in coverage and "XID" not in coverage
    assert "max_over_time(DCGM_FI_DEV_GPU_TEMP[180s]) >= 75.0" in thermal
    assert "timestamp(DCGM_FI_DEV_GPU_TEMP)" in thermal
    assert "[180s:]" not in thermal  # the timestamps are kept by the values' test, not a subquery


def test_a_checked_signal_is_the_validated_one() -> None:
    values: dict[str, Any] = {
        "node": "gpu-node-4",
        "kind": SignalKind.THERMAL,
        "source": "p",
        "observed_at": NOW,
        "gpu": 3,
        "gpu_uuid": GPU["UUID"],
        "code": None,
        "value": 81.0,
        "since": None,
        "labels": dict(GPU),
    }
    assert values.keys() == Signal.model_fields.keys()  # the fast path fills every field
    fast, slow = checked_signal(dict(values)), Signal.model_validate(values)
    assert fast == slow and hash(fast) == hash(slow)
    assert fast.model_dump() == slow.model_dump()
    assert fast.at(NOW + timedelta(seconds=1)).observed_at == NOW + timedelta(seconds=1)
    with pytest.raises(ValidationError):  # a field it does not know: validated, and refused
        checked_signal({**values, "extra": 1})


def test_the_sample_bound_stays_under_the_kinds_shortest_for() -> None:
    prom = source("http://127.0.0.1:1")
    assert prom.max_sample_age(SignalKind.THERMAL) == 75.0
    prom.set_interest(Interest(shortest_for={SignalKind.THERMAL: timedelta(seconds=20)}))
    assert prom.max_sample_age(SignalKind.THERMAL) == 15.0
    prom.set_interest(Interest(shortest_for={SignalKind.NODE_CONDITION: timedelta(seconds=8)}))
    assert prom.max_sample_age(SignalKind.THERMAL) == 75.0  # another kind's `for` is not ours
