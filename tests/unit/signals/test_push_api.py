from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.testclient import TestClient

from remediator.clock import FakeClock
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.alert_state import FiringAlerts
from remediator.signals.sources.push import InboxFull, SignalInbox, make_signals_router
from tests.unit.signals.alertmanager_payloads import FIRING_XID, resolved

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def item(**overrides: Any) -> dict[str, Any]:
    base = {
        "node": "gpu-node-1",
        "kind": "xid",
        "source": "npd",
        "observed_at": "2026-01-01T11:59:30Z",
        "gpu": 2,
        "code": 79,
    }
    return {**base, **overrides}


@pytest.fixture
def inbox() -> SignalInbox:
    return SignalInbox(capacity=10)


@pytest.fixture
def client(inbox: SignalInbox) -> TestClient:
    app = FastAPI()
    app.include_router(make_signals_router(inbox, clock=FakeClock(NOW)))
    return TestClient(app)


def test_accepts_a_batch(client: TestClient, inbox: SignalInbox) -> None:
    response = client.post("/api/v1/signals", json=[item(), item(kind="thermal", value=83.5)])
    assert response.status_code == 202
    assert response.json() == {"accepted": 2}
    xid, thermal = inbox.drain()
    assert (xid.node, xid.kind, xid.code, xid.gpu) == ("gpu-node-1", SignalKind.XID, 79, 2)
    assert thermal.value == 83.5
    assert inbox.drain() == ()


def test_bad_items_are_named_and_the_rest_of_the_batch_goes_on(
    client: TestClient, inbox: SignalInbox
) -> None:
    batch = [item(), item(kind="bogus"), item(gpu=-1, node=""), item(extra="x")]
    response = client.post("/api/v1/signals", json=batch)
    assert response.status_code == 202
    body = response.json()
    assert body["accepted"] == 1
    assert {(p["index"], p["field"]) for p in body["refused"]} == {
        (1, "kind"),
        (2, "gpu"),
        (2, "node"),
        (3, "extra"),
    }
    assert all(p["reason"] for p in body["refused"])
    assert [s.code for s in inbox.drain()] == [79]


def test_a_batch_with_nothing_acceptable_is_refused(client: TestClient, inbox: SignalInbox) -> None:
    response = client.post("/api/v1/signals", json=[item(kind="bogus"), item(code=-3)])
    assert response.status_code == 422
    assert [p["index"] for p in response.json()["detail"]] == [0, 1]
    assert len(inbox) == 0


def test_a_well_formed_batch_refused_on_rules_a_schema_cannot_state_is_a_202(
    client: TestClient, inbox: SignalInbox
) -> None:
    """#39 item 23: a batch the schema allows was a 422 when every item was too old (or began
    after it was observed), rules a JSON schema cannot state; schemathesis called it a valid
    request rejected. It is a 202 that takes nothing and names each refusal."""
    old = (NOW - timedelta(hours=3)).isoformat()
    late = item(since="2026-01-01T11:59:45Z", observed_at="2026-01-01T11:59:30Z")
    response = client.post("/api/v1/signals", json=[reading(observed_at=old), late])
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["accepted"] == 0
    assert [(p["index"], p["reason"]) for p in body["refused"]] == [
        (
            0,
            f"{old} is older than 300 s (server time {NOW.isoformat()}): a reading that old is "
            "not evidence of the node's state now",
        ),
        (1, "since must not be after observed_at"),
    ]
    assert len(inbox) == 0


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"gpu": True}, "gpu"),
        ({"code": False}, "code"),
        ({"kind": "thermal", "code": None, "value": True}, "value"),
        ({"observed_at": 1767268770}, "observed_at"),
        ({"since": 0}, "since"),
    ],
)
def test_an_item_is_read_as_its_json_type(
    client: TestClient, inbox: SignalInbox, bad: dict[str, Any], field: str
) -> None:
    """#39 item 23: `true` was taken as GPU 1 and a number as Unix seconds, where the schema
    says an integer and date-time text; with nothing else taken, the batch is a 422."""
    response = client.post("/api/v1/signals", json=[item(**bad)])
    assert response.status_code == 422, response.text
    assert [p["field"] for p in response.json()["detail"]] == [field]
    assert len(inbox) == 0


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"code": 10**20}, "outside 1..65535"),
        ({"code": 2**31}, "outside 1..65535"),
        ({"kind": "nvlink", "code": 2**40}, "outside 0..2147483647"),
        ({"kind": "thermal", "code": None, "value": float("nan")}, "not a finite number"),
        ({"kind": "thermal", "code": None, "value": float("inf")}, "not a finite number"),
        ({"kind": "ecc", "code": None, "value": -float("inf")}, "not a finite number"),
        ({"kind": "thermal", "code": None, "value": 255}, "outside -50..200"),
        ({"kind": "nvlink", "code": None, "value": 1e300}, "outside"),
        ({"gpu": 4096}, "less than or equal to 1023"),
        ({"node": "GPU-Node-1"}, "not a Kubernetes node name"),
        ({"node": "gpu_node_1"}, "not a Kubernetes node name"),
        ({"node": "-gpu"}, "not a Kubernetes node name"),
        ({"node": "a" * 254}, "at most 253"),
    ],
)
def test_out_of_range_items_are_refused_with_the_reason(
    client: TestClient, inbox: SignalInbox, bad: dict[str, Any], words: str
) -> None:
    """Problem 6: an XID code of 10^20 reached the database layer (OverflowError) and broke the
    intake job; NaN, inf and names that are not node names were accepted."""
    body = json.dumps([item(node="gpu-node-2"), item(**bad)])  # allow_nan: NaN, Infinity
    response = client.post(
        "/api/v1/signals", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 202, response.text
    refused = response.json()["refused"]
    assert [p["index"] for p in refused] == [1]
    assert words in refused[0]["reason"]
    assert [s.node for s in inbox.drain()] == ["gpu-node-2"]


def reading(**overrides: Any) -> dict[str, Any]:
    return item(kind="thermal", code=None, value=83.0, **overrides)


def test_readings_older_than_the_bound_are_refused_with_the_reason(
    client: TestClient, inbox: SignalInbox
) -> None:
    """Problem 4 (push): readings with observed_at three hours old opened a remediation."""
    old = (NOW - timedelta(hours=3)).isoformat()
    recent = (NOW - timedelta(minutes=4)).isoformat()
    response = client.post(
        "/api/v1/signals", json=[reading(observed_at=old), reading(observed_at=recent)]
    )
    assert response.status_code == 202
    (refused,) = response.json()["refused"]
    assert (refused["index"], refused["field"]) == (0, "observed_at")
    assert "older than 300 s" in refused["reason"]
    assert [s.observed_at for s in inbox.drain()] == [NOW - timedelta(minutes=4)]


def test_a_late_kernel_event_is_taken_within_its_own_window(
    client: TestClient, inbox: SignalInbox
) -> None:
    """#22 item 6: an XID an agent queued through a controller outage longer than the readings'
    bound was refused and lost. An event keeps its meaning: taken up to a day old."""
    late = (NOW - timedelta(hours=3)).isoformat()
    too_late = (NOW - timedelta(hours=25)).isoformat()
    response = client.post(
        "/api/v1/signals", json=[item(observed_at=late), item(observed_at=too_late)]
    )
    assert response.status_code == 202
    (refused,) = response.json()["refused"]
    assert refused["index"] == 1 and "older than 86400 s" in refused["reason"]
    assert "xid window" in refused["reason"]
    assert [s.observed_at for s in inbox.drain()] == [NOW - timedelta(hours=3)]


def test_the_age_bounds_are_the_routers_settings(inbox: SignalInbox) -> None:
    app = FastAPI()
    refused: list[dict[str, Any]] = []
    router = make_signals_router(
        inbox,
        clock=FakeClock(NOW),
        max_age=timedelta(minutes=1),
        event_max_age=timedelta(minutes=2),
        on_refused=refused.extend,
    )
    app.include_router(router)
    client = TestClient(app)
    response = client.post("/api/v1/signals", json=[reading()])  # 30 s old
    assert response.status_code == 202 and "refused" not in response.json()

    def taken(batch: list[dict[str, Any]]) -> int:
        answer = client.post("/api/v1/signals", json=batch)
        assert answer.status_code == 202, answer.text
        accepted: int = answer.json()["accepted"]
        return accepted

    stale = (NOW - timedelta(seconds=61)).isoformat()
    assert taken([reading(observed_at=stale)]) == 0
    assert taken([item(observed_at=stale)]) == 1
    staler = (NOW - timedelta(seconds=121)).isoformat()
    assert taken([item(observed_at=staler)]) == 0
    assert [p["field"] for p in refused] == ["observed_at", "observed_at"]


@pytest.mark.parametrize("node", ["gpu\x00node", "gpu node", "gpu-node\n"])
def test_node_names_with_control_characters_or_spaces_are_refused(
    client: TestClient, inbox: SignalInbox, node: str
) -> None:
    response = client.post("/api/v1/signals", json=[item(), item(node=node)])
    assert response.status_code == 202
    assert [(p["index"], p["field"]) for p in response.json()["refused"]] == [(1, "node")]
    assert len(inbox) == 1


def test_naive_timestamp_and_future_are_refused(client: TestClient, inbox: SignalInbox) -> None:
    future = (NOW + timedelta(hours=1)).isoformat()
    response = client.post(
        "/api/v1/signals", json=[item(observed_at="2026-01-01T11:59:30"), item(observed_at=future)]
    )
    assert response.status_code == 422
    fields = [(p["index"], p["field"]) for p in response.json()["detail"]]
    assert fields == [(0, "observed_at"), (1, "observed_at")]
    assert "future" in response.json()["detail"][1]["reason"]
    assert len(inbox) == 0


@pytest.mark.parametrize("body", [b"{not json", b'{"node": "x"}', b"42"])
def test_body_must_be_a_json_list(client: TestClient, body: bytes) -> None:
    response = client.post(
        "/api/v1/signals", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "body"


def test_full_inbox_refuses_the_whole_batch(client: TestClient, inbox: SignalInbox) -> None:
    assert client.post("/api/v1/signals", json=[item()] * 8).status_code == 202
    response = client.post("/api/v1/signals", json=[item()] * 3)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert len(inbox) == 8


def test_alertmanager_webhook(client: TestClient, inbox: SignalInbox) -> None:
    response = client.post("/api/v1/alertmanager", json=FIRING_XID)
    assert response.status_code == 200
    body = response.json()
    assert (body["accepted"], body["resolved"], len(body["ignored"])) == (2, 0, 1)
    kinds = sorted(s.kind for s in inbox.drain())
    assert kinds == [SignalKind.THERMAL, SignalKind.XID]


def test_alertmanager_resolved_stores_nothing(client: TestClient, inbox: SignalInbox) -> None:
    response = client.post("/api/v1/alertmanager", json=resolved(FIRING_XID))
    assert response.status_code == 200
    assert response.json()["resolved"] == 3
    assert len(inbox) == 0


def test_alertmanager_wrong_version_is_a_client_error(
    client: TestClient, inbox: SignalInbox
) -> None:
    response = client.post("/api/v1/alertmanager", json={**FIRING_XID, "version": "3"})
    assert response.status_code == 422
    assert "version" in response.json()["detail"][0]["reason"]
    assert len(inbox) == 0


def test_router_takes_the_apps_auth_dependencies(inbox: SignalInbox) -> None:
    def require_token(authorization: str = Header(default="")) -> None:
        if authorization != "Bearer s3cret":
            raise HTTPException(401, "bad token")

    app = FastAPI()
    app.include_router(make_signals_router(inbox, [Depends(require_token)], clock=FakeClock(NOW)))
    client = TestClient(app)
    assert client.post("/api/v1/signals", json=[item()]).status_code == 401
    assert client.post("/api/v1/alertmanager", json=FIRING_XID).status_code == 401
    assert len(inbox) == 0
    ok = client.post("/api/v1/signals", json=[item()], headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 202


def test_inbox_is_a_source_that_drains() -> None:
    inbox = SignalInbox(capacity=5)
    client_app = FastAPI()
    client_app.include_router(make_signals_router(inbox, clock=FakeClock(NOW)))
    TestClient(client_app).post("/api/v1/signals", json=[item()])
    result = inbox.poll(NOW)
    assert len(result.signals) == 1
    assert result.health.up and result.health.name == "push"
    assert result.health.detail["accepted_total"] == "1"
    assert inbox.poll(NOW).signals == ()


def test_inbox_loses_nothing_under_concurrent_push_and_drain() -> None:
    inbox = SignalInbox(capacity=1000)
    app = FastAPI()
    app.include_router(make_signals_router(inbox, clock=FakeClock(NOW)))
    client = TestClient(app)
    statuses: list[int] = []
    taken: list[int] = []

    def writer() -> None:
        for _ in range(20):
            statuses.append(client.post("/api/v1/signals", json=[item()] * 10).status_code)

    def reader() -> None:
        for _ in range(50):
            taken.append(len(inbox.drain()))

    threads = [threading.Thread(target=writer) for _ in range(4)] + [
        threading.Thread(target=reader)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [202] * 80
    assert sum(taken) + len(inbox.drain()) == 800


def test_put_refuses_beyond_capacity() -> None:
    inbox = SignalInbox(capacity=2)
    signal = Signal.model_validate(item())
    assert inbox.put([signal, signal]) == 2
    with pytest.raises(InboxFull, match="2 of 2"):
        inbox.put([signal])
    assert len(inbox.drain()) == 2
    assert inbox.put([signal]) == 1


def test_openapi_documents_both_bodies_without_dangling_refs(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    for path in ("/api/v1/signals", "/api/v1/alertmanager"):
        operation = document["paths"][path]["post"]
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        assert "#/$defs/" not in json.dumps(schema)
        assert {"422", "503"} <= set(operation["responses"])
    signals = document["paths"]["/api/v1/signals"]["post"]["requestBody"]
    item = signals["content"]["application/json"]["schema"]["items"]
    assert "xid" in item["properties"]["kind"]["enum"]


def test_the_inbox_keeps_the_alert_registry_it_is_given_even_when_empty() -> None:
    """An empty registry is falsy (it has a length): `alerts or default` lost the settings."""
    given = FiringAlerts(hold=timedelta(hours=9))
    assert SignalInbox(alerts=given).alerts is given


def test_the_schema_states_the_accepted_answer_and_each_refusal(client: TestClient) -> None:
    """#39 item 9: the 202 answer was an empty schema, so the per-item refusals it carries (an
    unknown node, a GPU the node lacks, …) were stated nowhere."""
    doc = client.get("/openapi.json").json()
    answer = doc["paths"]["/api/v1/signals"]["post"]["responses"]["202"]
    assert answer["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PushAccepted"
    }
    schemas = doc["components"]["schemas"]
    assert schemas["PushAccepted"]["required"] == ["accepted"]
    refused = schemas["PushAccepted"]["properties"]["refused"]["items"]
    assert refused == {"$ref": "#/components/schemas/PushProblem"}
    field = schemas["PushProblem"]["properties"]["field"]["description"]
    assert "`node`: no such node in the cluster" in field and "`gpu`: an index beyond" in field
