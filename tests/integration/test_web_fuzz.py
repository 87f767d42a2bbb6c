"""Schema-based fuzzing of our own OpenAPI: schemathesis generates requests, valid and not, for
every API operation against a seeded history on a real database (commands really run). As an
operator, every check schemathesis has must hold (server errors, status codes, content types,
headers, response schemas, negative data refused, positive data accepted, auth, methods); with no
token, no answer may be a 5xx or differ from the schema, and a 405 must say what is allowed.

Each operation is driven through Hypothesis directly with the operation's strategy (schemathesis'
own pytest plugin does not run under this pytest); one pytest case per operation keeps failures
named by route.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as CHECKS_REGISTRY
from schemathesis.checks import load_all_checks, not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from tests.fixtures.web import OPERATOR_TOKEN, Console

pytestmark = pytest.mark.integration

# Bounded so the whole file stays well under a minute of CPU; derandomized, so a run is repeatable.
EXAMPLES = 10
OPERATIONS = (
    "GET /api/v1/remediations",
    "GET /api/v1/remediations/{remediation_id}",
    "GET /api/v1/nodes/{name}",
    "GET /api/v1/policies",
    "GET /api/v1/overview",
    "GET /api/v1/controller",
    "GET /api/v1/audit",
    "GET /api/v1/live",
    "POST /api/v1/remediations/{remediation_id}/approve",
    "POST /api/v1/remediations/{remediation_id}/cancel",
    "POST /api/v1/remediations/{remediation_id}/retry",
    "POST /api/v1/remediations/{remediation_id}/release",
    "POST /api/v1/controller/pause",
    "POST /api/v1/controller/resume",
    "POST /api/v1/controller/reset-breaker",
    "GET /api/v1/fleet/breaker",
    "GET /api/v1/domains",
    "GET /api/v1/domains/{domain}",
    "POST /api/v1/fleet/breaker/reset",
    "POST /api/v1/signals",
    "GET /api/v1/signals",
    "POST /api/v1/alertmanager",
    "POST /api/v1/agents/heartbeat",
    "GET /api/v1/agents",
    "GET /api/v1/agents/admission",
    "GET /api/v1/optouts",
    "POST /api/v1/optouts",
    "DELETE /api/v1/optouts/{opt_out_id}",
    "GET /api/v1/fences",
    "POST /api/v1/fences/{node}",
    "GET /api/v1/rma",
    "GET /api/v1/rma/{ref}",
    "GET /api/v1/rma/{ref}/bundle",
    "PATCH /api/v1/rma/{ref}",
    "GET /api/v1/reliability",
    "GET /api/v1/validations",
    "GET /api/v1/gpus",
    "GET /api/v1/gpus/{uuid}",
    "GET /api/v1/machines/{machine_id}",
    "POST /api/v1/machines/{machine_id}/lift-quarantine",
    "GET /healthz",
    "HEAD /healthz",
    "GET /readyz",
    "HEAD /readyz",
    "GET /metrics",
    "HEAD /metrics",
)
AUTH = {"operator": {"Authorization": f"Bearer {OPERATOR_TOKEN}"}, "anonymous": {}}
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
load_all_checks()
ALL_CHECKS = list(CHECKS_REGISTRY.get_all())


def _operations(console: Console) -> dict[str, schemathesis.APIOperation]:
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", console.app)
    found = {}
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"schemathesis cannot read an operation: {result.err()}"
        operation = result.ok()
        found[f"{operation.method.upper()} {operation.path}"] = operation
    return found


def _has_inputs(operation: schemathesis.APIOperation) -> bool:
    return (operation.body is not None and len(operation.body) > 0) or any(
        True for _ in operation.iter_parameters()
    )


def as_a_client_would(
    case: schemathesis.Case, console: Console, handed_out: Collection[str] = ()
) -> schemathesis.Case:
    """What a schema cannot say and a client cannot get wrong by following it: a cursor
    is only ever one the server handed out (opaque, so any other is a 400), and a signal's
    reading is recent (older than the age bound is refused as stale evidence)."""
    if isinstance(case.query, dict):
        for key in [k for k in case.query if k.endswith("cursor")]:
            if case.query[key] and str(case.query[key]) not in handed_out:
                del case.query[key]
    window = (case.query or {}).get("from"), (case.query or {}).get("to")
    if all(isinstance(t, str) for t in window) and window[0] > window[1]:  # type: ignore[operator]
        # A window's start before its end: a rule between two fields the schema cannot state.
        case.query["from"], case.query["to"] = window[1], window[0]  # type: ignore[index]
    if case.path == "/api/v1/signals" and isinstance(case.body, list):
        now = console.clock.now()
        for item in case.body:
            if isinstance(item, dict) and "observed_at" in item:
                item["observed_at"] = now.isoformat()
            if isinstance(item, dict) and _after(item.get("since"), now):
                # When a condition began is not after it was observed: another rule between two
                # fields.
                item["since"] = now.isoformat()
    return case


def _after(value: object, now: datetime) -> bool:
    if not isinstance(value, str):
        return False
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return False
    return when.tzinfo is not None and when > now


def test_schema_lists_every_fuzzed_operation(shared_console: Console) -> None:
    assert set(_operations(shared_console)) == set(OPERATIONS)


@pytest.mark.parametrize("mode", list(GenerationMode), ids=str)
@pytest.mark.parametrize("name", OPERATIONS)
def test_every_check_holds_for_an_operator(
    shared_console: Console, name: str, mode: GenerationMode
) -> None:
    """Every check schemathesis has (status codes, content types, headers, bodies, negative data
    refused, positive data accepted, auth, methods), requests valid and not, as an operator."""
    operation = _operations(shared_console)[name]
    headers = AUTH["operator"]
    strategy = operation.as_strategy(generation_mode=mode)
    if mode is GenerationMode.NEGATIVE:
        if not _has_inputs(operation):
            pytest.skip("nothing to make invalid: the operation takes no input")
    else:
        strategy = strategy.map(lambda case: as_a_client_would(case, shared_console))

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        case.validate_response(response, checks=ALL_CHECKS, headers=headers)

    fuzz()


@pytest.mark.parametrize("name", OPERATIONS)
def test_no_server_errors_or_schema_violations_without_a_token(
    shared_console: Console, name: str
) -> None:
    operation = _operations(shared_console)[name]
    headers = AUTH["anonymous"]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(headers=headers)
        what = (
            f"{case.method} {case.formatted_path} query={case.query} body={case.body!r} → "
            f"{response.status_code}: {response.text[:500]}"
        )
        assert response.status_code < 500, what
        if response.status_code == 405:
            assert response.headers.get("allow"), what
        case.validate_response(response, checks=CHECKS, headers=headers)

    fuzz()
