"""The demo's generated controller and Prometheus configs, and the state summary it reads from
the console's API."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import yaml

from remediator.demo.config import ControllerInputs, controller_settings, prometheus_config
from remediator.demo.status import fetch_all, summarize
from remediator.settings import (
    AwsProviderSettings,
    ClusterApiProviderSettings,
    GceProviderSettings,
    Settings,
    load_settings,
)

INPUTS = ControllerInputs(
    kubeconfig=Path("/d/kubeconfig"),
    policies_dir=Path("/d/policies"),
    database_path=Path("/d/remediator.db"),
    nodepool_url="http://127.0.0.1:4001",
    host="127.0.0.1",
    port=8080,
    operator_token="tok",
)


def test_controller_settings_round_trip_through_the_real_loader(tmp_path: Path) -> None:
    data = controller_settings(replace(INPUTS, prometheus_url="http://127.0.0.1:9090"))
    path = tmp_path / "remediator.yaml"
    path.write_text(yaml.safe_dump(data))
    settings = load_settings(path)
    assert settings.database_url == "sqlite:////d/remediator.db"
    assert settings.kubeconfig == Path("/d/kubeconfig")
    assert settings.provider.url == "http://127.0.0.1:4001"
    assert settings.web.listen == "127.0.0.1:8080"
    assert [t.get_secret_value() for t in settings.web.operator_tokens] == ["tok"]
    assert settings.prometheus_url == "http://127.0.0.1:9090"
    assert settings.leader_election.enabled is False
    assert settings.poll_interval_seconds <= 2


@pytest.mark.parametrize(
    ("provider", "kind"),
    [
        ({"type": "clusterapi"}, ClusterApiProviderSettings),
        (
            {
                "type": "aws",
                "region": "us-east-1",
                "endpoint_url": "http://127.0.0.1:5000",
                "test_credentials": {"access_key_id": "testing", "secret_access_key": "testing"},
            },
            AwsProviderSettings,
        ),
        (
            {
                "type": "gce",
                "project": "p",
                "api_endpoint": "http://127.0.0.1:1",
                "anonymous": True,
            },
            GceProviderSettings,
        ),
    ],
)
def test_the_simulators_provider_object_becomes_the_controllers(
    provider: dict[str, object], kind: type
) -> None:
    settings = Settings(**controller_settings(replace(INPUTS, provider=provider)))
    assert isinstance(settings.provider, kind)


def test_without_prometheus_the_controller_is_told_so() -> None:
    assert controller_settings(INPUTS)["prometheus_url"] is None


def test_prometheus_scrapes_the_exporter_endpoint() -> None:
    config = prometheus_config("http://127.0.0.1:4242/")
    (job,) = config["scrape_configs"]
    assert job["static_configs"] == [{"targets": ["127.0.0.1:4242"]}]
    assert job["metrics_path"] == "/metrics"
    assert config["global"]["scrape_interval"] == "2s"


def test_summary_orders_work_then_waiting_then_outcomes() -> None:
    items = [
        {"state": "succeeded"},
        {"state": "draining"},
        {"state": "awaiting_approval"},
        {"state": "succeeded"},
        {"state": "held"},
    ]
    assert summarize(items) == "1 draining · 1 awaiting_approval · 1 held · 2 succeeded"
    assert summarize([]) == "no remediations yet"
    assert summarize([{"state": "teleporting"}]) == "1 teleporting"


class Pages(BaseHTTPRequestHandler):
    """Two pages of the remediations API, behind a token."""

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        if self.headers.get("Authorization") != "Bearer tok":
            status, body = 401, {"reason": "no token"}
        elif query.get("cursor") == ["c2"]:
            status, body = 200, {"items": [{"state": "held"}], "next_cursor": None}
        else:
            status, body = 200, {"items": [{"state": "draining"}], "next_cursor": "c2"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        return


def test_fetch_all_follows_the_cursor_with_the_token() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with httpx.Client(timeout=5.0) as client:
            assert [i["state"] for i in fetch_all(client, url, "tok")] == ["draining", "held"]
            with pytest.raises(httpx.HTTPStatusError):
                fetch_all(client, url, "wrong")
    finally:
        server.shutdown()
        server.server_close()
