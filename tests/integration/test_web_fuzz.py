"""Schema-based fuzzing of our own OpenAPI: schemathesis generates requests, valid and not, for
every API operation, sent as an operator and with no token against a seeded history on a real
database (commands really run). No answer may be a 5xx, any answer the schema describes must
match it, and a 405 must say what is allowed.

Each operation is driven through Hypothesis directly with the operation's strategy (schemathesis'
own pytest plugin does not run under this pytest); one pytest case per operation keeps failures
named by route.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from tests.fixtures.web import OPERATOR_TOKEN, Console

pytestmark = pytest.mark.integration

EXAMPLES = 50
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
    "POST /api/v1/signals",
    "GET /api/v1/signals",
    "POST /api/v1/alertmanager",
    "POST /api/v1/agents/heartbeat",
    "GET /api/v1/agents",
    "GET /healthz",
    "HEAD /healthz",
    "GET /readyz",
    "HEAD /readyz",
    "GET /metrics",
    "HEAD /metrics",
)
AUTH = {"operator": {"Authorization": f"Bearer {OPERATOR_TOKEN}"}, "anonymous": {}}
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


def _operations(console: Console) -> dict[str, schemathesis.APIOperation]:
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", console.app)
    found = {}
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"schemathesis cannot read an operation: {result.err()}"
        operation = result.ok()
        found[f"{operation.method.upper()} {operation.path}"] = operation
    return found


def test_schema_lists_every_fuzzed_operation(shared_console: Console) -> None:
    assert set(_operations(shared_console)) == set(OPERATIONS)


@pytest.mark.parametrize("auth", sorted(AUTH))
@pytest.mark.parametrize("name", OPERATIONS)
def test_no_server_errors_or_schema_violations(
    shared_console: Console, name: str, auth: str
) -> None:
    operation = _operations(shared_console)[name]
    headers = AUTH[auth]

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
